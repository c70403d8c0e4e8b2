"""quantkv: low-precision kernels for LLM inference over a paged KV cache.

Arrays are numpy arrays (ml_dtypes included) or any CPU object with ``__dlpack__`` (torch
tensors...), taken zero-copy. fp8 and fp4 data travel as their bits: ``uint8`` or a
float8_e4m3fn / float8_e8m0fnu / float4_e2m1fn_x2 dtype (two e2m1 values per byte, low nibble
first); bfloat16 as ``uint16`` bits or a bfloat16 dtype. Results come back as numpy arrays
(fp8 / bfloat16 ones typed with ml_dtypes when an input is an ml_dtypes array), or as torch
tensors when the inputs are torch tensors. Bad shapes or dtypes raise ValueError with
the library's message. ``import quantkv.torch`` registers the operations as ``torch.ops.quantkv``.

Caches: ``PagedKVCache`` owns its storage (tests, demos); ``PagedCacheView`` wraps an engine's
own blocks, lengths and page table. Every operation that takes a cache takes either.
"""
from ._quantkv import *  # noqa: F401,F403  (the extension's functions and classes)
from ._quantkv import __version__  # noqa: F401

