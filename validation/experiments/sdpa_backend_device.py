"""Which kernel does ``F.scaled_dot_product_attention`` run on this GPU (bf16, the shapes of
``gpumodel validate``'s torch families)? Prints each shape's CUDA kernel names from
torch.profiler, and the backend gpumodel.validate.conditions.sdpa_backend reads from them.

Run on a GPU machine: ``python validation/experiments/sdpa_backend_device.py``.
"""

from __future__ import annotations

import json


def main() -> int:
    import torch
    import torch.nn.functional as F

    from gpumodel.validate.conditions import SDPAS, sdpa_backend

    out = []
    for batch, heads, seq, hd, causal in SDPAS:
        q, k, v = (torch.randn(batch, heads, seq, hd, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))  # fmt: skip

        def fn(q=q, k=k, v=v, causal=causal):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        impl, names = sdpa_backend(torch, fn)
        out.append({"shape": [batch, heads, seq, hd, causal], "impl": impl, "kernels": names})
        print(json.dumps(out[-1]))
    print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(),
          "cudnn_sdp", torch.backends.cuda.cudnn_sdp_enabled(),
          "flash_sdp", torch.backends.cuda.flash_sdp_enabled())  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
