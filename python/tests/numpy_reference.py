"""An independent numpy reference of quantkv's operations (contract §1-§5).

Written from the contract alone, without the C++ reference: the number formats are decoded with
lookup tables built from their bit definitions and encoded by nearest-value search over those
tables; the swizzled scale layout by reshape/transpose; the operations in float64 (or, where
the contract fixes float32 steps, in numpy float32, which is IEEE single precision). The tests
compare the library against this module, so that two implementations check each other.
"""
import numpy as np

# ----------------------------------------------------------------------------- formats


def _e4m3_table():
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = (codes & 0x7).astype(np.float64)
    mag = np.where(exp == 0, man / 8.0 * 2.0**-6, (1.0 + man / 8.0) * 2.0 ** (exp - 7.0))
    val = sign * mag
    val[(codes & 0x7F) == 0x7F] = np.nan
    return val


E4M3_VALUES = _e4m3_table()                       # float64 [256]
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
E8M0_VALUES = np.array([2.0 ** (e - 127) for e in range(255)] + [np.nan])
E4M3_MAX = 448.0
E2M1_MAX = 6.0


def decode_e4m3(bits):
    return E4M3_VALUES[np.asarray(bits, dtype=np.uint8)]


def decode_e2m1(codes):
    return E2M1_VALUES[np.asarray(codes, dtype=np.uint8) & 0xF]


def decode_e8m0(bits):
    return E8M0_VALUES[np.asarray(bits, dtype=np.uint8)]


def _nearest_code(mag, grid):
    """Index of the grid value nearest to each magnitude (grid ascending, codes = indices),
    ties to the even index; magnitudes beyond the grid saturate to its last entry."""
    hi = np.clip(np.searchsorted(grid, mag), 1, len(grid) - 1)
    lo = hi - 1
    d_lo = mag - grid[lo]
    d_hi = grid[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    idx = np.where(pick_hi, hi, lo)
    return np.where(mag >= grid[-1], len(grid) - 1, idx)


def encode_e4m3(x):
    """float -> e4m3 bits: round to nearest even, saturate to ±448, NaN -> 0x7F, keep sign."""
    x = np.asarray(x, dtype=np.float64)
    grid = E4M3_VALUES[:127]  # codes 0x00..0x7E, ascending
    code = _nearest_code(np.abs(np.nan_to_num(x, nan=0.0, posinf=1e300, neginf=-1e300)), grid)
    code = code | np.where(np.signbit(x), 0x80, 0)
    return np.where(np.isnan(x), 0x7F, code).astype(np.uint8)


def encode_e2m1(x):
    """float -> e2m1 code: round to nearest even, saturate to ±6, NaN -> 0x7, keep sign."""
    x = np.asarray(x, dtype=np.float64)
    grid = E2M1_VALUES[:8]
    code = _nearest_code(np.abs(np.nan_to_num(x, nan=0.0, posinf=1e300, neginf=-1e300)), grid)
    code = code | np.where(np.signbit(x), 0x8, 0)
    return np.where(np.isnan(x), 0x7, code).astype(np.uint8)


def encode_e8m0(x):
    """float -> e8m0 bits: |x| rounded up to a power of two; inf -> 0xFE, NaN -> 0xFF."""
    mag = np.abs(np.asarray(x, dtype=np.float64))
    m, e = np.frexp(mag)                   # mag = m * 2^e, m in [0.5, 1)
    exp = np.where(m == 0.5, e - 1, e)     # exact powers of two stay
    code = np.clip(exp + 127, 0, 254)
    code = np.where(mag == 0, 0, code)
    code = np.where(np.isinf(mag), 0xFE, code)
    return np.where(np.isnan(mag), 0xFF, code).astype(np.uint8)


def encode_bf16(x):
    """float32 -> bf16 bits, round to nearest even: the nearer in magnitude of the truncated
    value and the next one away from zero, ties to the even code."""
    x = np.asarray(x, dtype=np.float32)
    down = (x.view(np.uint32) >> 16).astype(np.uint32)
    with np.errstate(invalid="ignore"):  # NaN inputs; they map to 0x7FFF below
        mag = np.abs(x.astype(np.float64))
        lo = np.abs((down << 16).view(np.float32).astype(np.float64))
        hi = np.abs(((down + 1) << 16).view(np.float32).astype(np.float64))
        pick_hi = (hi - mag < mag - lo) | ((hi - mag == mag - lo) & (down % 2 == 1))
    out = np.where(pick_hi, down + 1, down).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), out)


def decode_bf16(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def pack_e2m1(codes):
    """e2m1 codes [..., K] -> uint8 [..., K/2], element 2c in the low nibble of byte c."""
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def unpack_e2m1(packed):
    packed = np.asarray(packed, dtype=np.uint8)
    out = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = packed & 0xF
    out[..., 1::2] = packed >> 4
    return out


# ----------------------------------------------------------------------------- scale layout


def swizzle_scales(linear):
    """uint8 [R, Kb] -> [ceil(R/128), ceil(Kb/4), 32, 4, 4] (padding zero), by reshape: row
    r = 128*i + 32*j + k and column kb = 4*l + m go to [i, l, k, j, m]."""
    r, kb = linear.shape
    rt, kt = -(-r // 128), -(-kb // 4)
    padded = np.zeros((rt * 128, kt * 4), dtype=np.uint8)
    padded[:r, :kb] = linear
    return np.ascontiguousarray(padded.reshape(rt, 4, 32, kt, 4).transpose(0, 3, 2, 1, 4))


def unswizzle_scales(swizzled, rows, kb_count):
    rt, kt = swizzled.shape[:2]
    padded = swizzled.transpose(0, 3, 2, 1, 4).reshape(rt * 128, kt * 4)
    return np.ascontiguousarray(padded[:rows, :kb_count])


# ----------------------------------------------------------------------------- quantiser

FORMATS = {  # name: (values per scale, fp4 data, e8m0 scales)
    "nvfp4": (16, True, False),
    "mxfp4": (32, True, True),
    "mxfp8": (32, False, True),
}


def quantize_dynamic_block_scaled(x, fmt, global_scale=1.0):
    """contract §5 step by step in float32. x float32 [M, K] -> (data, swizzled scales)."""
    sfv, fp4, e8m0 = FORMATS[fmt]
    x = np.asarray(x, dtype=np.float32)
    m, k = x.shape
    blocks = x.reshape(m, k // sfv, sfv)
    amax = np.max(np.abs(blocks), axis=2)  # float32 [M, Kb]
    f32 = np.float32
    if fmt == "nvfp4":
        g = f32(global_scale)
        sf = encode_e4m3(g * (amax * (f32(1) / f32(6))))
        sf_val = decode_e4m3(sf).astype(np.float32)
        with np.errstate(divide="ignore"):
            out = np.where(sf_val != 0, f32(1) / (sf_val * (f32(1) / g)), f32(0)).astype(np.float32)
        scaled = blocks * out[:, :, None]
    else:
        emax = f32(E4M3_MAX if not fp4 else E2M1_MAX)
        sf = encode_e8m0(amax / emax)
        scaled = blocks / decode_e8m0(sf).astype(np.float32)[:, :, None]
    scaled = scaled.astype(np.float32).reshape(m, k)
    data = pack_e2m1(encode_e2m1(scaled)) if fp4 else encode_e4m3(scaled)
    return data, swizzle_scales(sf)


def dequantize(data, scales, fmt, rows, k):
    """(data, swizzled scales) -> float64 [rows, k] values times |scale| (contract §4's a(m,k)·|s|)."""
    sfv, fp4, e8m0 = FORMATS[fmt]
    vals = decode_e2m1(unpack_e2m1(data)) if fp4 else decode_e4m3(data)
    lin = unswizzle_scales(scales, rows, k // sfv)
    s = np.abs(decode_e8m0(lin) if e8m0 else decode_e4m3(lin))
    return vals * np.repeat(s, sfv, axis=1)


# ----------------------------------------------------------------------------- per-token fp8


def fp8_scale(amax, power_of_two):
    """contract §5: s = fl32(max(amax, 1e-4) / 448), optionally rounded up to a power of two."""
    amax = np.maximum(np.asarray(amax, dtype=np.float32), np.float32(1e-4))
    s = (amax / np.float32(E4M3_MAX)).astype(np.float32)
    if power_of_two:
        s = decode_e8m0(encode_e8m0(s)).astype(np.float32)
    return s


def indexer_k_store(k, power_of_two=True):
    """k float32 [T, D] -> (e4m3 bits [T, D], scales float32 [T])."""
    k = np.asarray(k, dtype=np.float32)
    s = fp8_scale(np.max(np.abs(k), axis=1), power_of_two)
    return encode_e4m3((k / s[:, None]).astype(np.float32)), s


def indexer_q_prepare(q, weights, power_of_two=True):
    """q float32 [T, H, D], weights [T, H] -> (e4m3 bits [T, H, D], q_s float64 [T, H])."""
    q = np.asarray(q, dtype=np.float32)
    t, h, d = q.shape
    s = fp8_scale(np.max(np.abs(q), axis=2), power_of_two)
    codes = encode_e4m3((q / s[:, :, None]).astype(np.float32))
    q_s = np.asarray(weights, dtype=np.float64) * h**-0.5 * d**-0.5 * s
    return codes, q_s


# ----------------------------------------------------------------------------- paged cache


def cache_rows(cache, b, positions, kv=0, layer=0):
    """The storage rows [n, H, D] of positions of sequence b, addressed through the lookup
    table by hand: page = table[b, p // page_size], slot = p % page_size."""
    positions = np.asarray(positions, dtype=np.int64)
    pages = cache.lookup_table[b, positions // cache.page_size].astype(np.int64)
    slots = positions % cache.page_size
    return cache.blocks[pages, kv, layer, slots], (pages, slots)


def cache_scale_rows(cache, b, positions, kv=0, layer=0):
    positions = np.asarray(positions, dtype=np.int64)
    pages = cache.lookup_table[b, positions // cache.page_size].astype(np.int64)
    return cache.scales[pages, kv, layer, positions % cache.page_size]


# ----------------------------------------------------------------------------- indexer


def indexer_scores(q_codes, q_s, offsets, k_cache, layer=0, causal=True):
    """Per token t: float64 scores [key_bound] (contract §3) and an error bound ε for an fp32
    implementation. Returns a list of (scores, eps)."""
    q = decode_e4m3(q_codes)               # [T, H, D]
    q_s = np.asarray(q_s, dtype=np.float64)
    out = []
    for b in range(len(offsets) - 1):
        start, end = int(offsets[b]), int(offsets[b + 1])
        cache_len = int(k_cache.cache_lengths[b])
        num_keys = cache_len + end - start
        keys, _ = cache_rows(k_cache, b, np.arange(num_keys), 0, layer)
        k = decode_e4m3(keys[:, 0, :])     # [num_keys, D]
        k_scale = cache_scale_rows(k_cache, b, np.arange(num_keys), 0, layer)[:, 0, 0]
        for i in range(end - start):
            t = start + i
            bound = cache_len + i + 1 if causal else num_keys
            dots = k[:bound] @ q[t].T      # [bound, H], exact in float64
            s = k_scale[:bound] * (np.maximum(dots, 0.0) @ q_s[t])
            mag = k_scale[:bound] * (np.abs(k[:bound]) @ np.abs(q[t]).T @ np.abs(q_s[t]))
            eps = 2.0**-14 * (np.max(mag) if bound else 0.0) + 1e-30
            out.append((s, eps))
    return out


def topk_positions(scores, top_k):
    """Exact ordering: score descending, then smaller position; NaN last; -1 padding."""
    j = np.arange(len(scores))
    key = np.where(np.isnan(scores), np.inf, -scores)
    order = np.lexsort((j, np.isnan(scores), key))
    n = min(top_k, len(scores))
    return np.concatenate([order[:n], -np.ones(top_k - n, dtype=np.int64)]).astype(np.int32)


def check_topk_within_eps(indices, scores, eps, top_k):
    """contract §3's rule against an independent reference: every key scoring more than ε above
    the n-th best must be returned, the order is free only among scores within ε, no
    duplicates, -1 after n. Returns a list of problems (empty when fine)."""
    problems = []
    n = min(top_k, len(scores))
    head, tail = indices[:n], indices[n:]
    if np.any(tail != -1):
        problems.append(f"expected -1 after {n} entries, got {tail}")
    if len(set(head.tolist())) != n or np.any(head < 0) or np.any(head >= len(scores)):
        problems.append(f"entries must be {n} distinct positions < {len(scores)}: {head}")
        return problems
    if n == 0:
        return problems
    nth = np.sort(scores)[::-1][n - 1]
    must = np.nonzero(scores > nth + eps)[0]
    missing = set(must.tolist()) - set(head.tolist())
    if missing:
        problems.append(f"positions {sorted(missing)} score above the threshold but are missing")
    if np.any(scores[head] < nth - eps):
        problems.append("a returned position scores below the threshold")
    if np.any(np.diff(scores[head]) > eps):
        problems.append("positions are not sorted by score (beyond ε)")
    return problems


# ----------------------------------------------------------------------------- fused QKV


def fused_qkv(hidden, hidden_scale, weight, weight_scale, fmt, k, tensor_sf):
    """float64 c [M, N] = tensor_sf · Σ_k a·b·|sa|·|sb| (contract §4). tensor_sf: float or a
    per-column float64 array [N] (section scales)."""
    m, n = hidden.shape[0], weight.shape[0]
    a = dequantize(hidden, hidden_scale, fmt, m, k)
    w = dequantize(weight, weight_scale, fmt, n, k)
    return (a @ w.T) * np.asarray(tensor_sf, dtype=np.float64), (np.abs(a) @ np.abs(w).T)
