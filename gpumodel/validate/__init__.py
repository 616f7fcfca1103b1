"""Measure a real device, calibrate the model on it, and report the model's own error."""
