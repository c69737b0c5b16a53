# AOT ID: ['1_forward']
from ctypes import c_void_p, c_long, c_int
import torch
import math
import random
import os
import tempfile
from math import inf, nan
from cmath import nanj
from torch._inductor.hooks import run_intermediate_hooks
from torch._inductor.utils import maybe_profile
from torch._inductor.codegen.memory_planning import _align as align
from torch import device, empty_strided
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import start_graph, end_graph
from torch._C import _cuda_getCurrentRawStream as get_raw_stream

aten = torch.ops.aten
inductor_ops = torch.ops.inductor
_quantized = torch.ops._quantized
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
assert_alignment = torch._C._dynamo.guards.assert_alignment
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
empty_strided_cpu_pinned = torch._C._dynamo.guards._empty_strided_cpu_pinned
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
empty_strided_xpu = torch._C._dynamo.guards._empty_strided_xpu
empty_strided_mtia = torch._C._dynamo.guards._empty_strided_mtia
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
alloc_from_pool = torch.ops.inductor._alloc_from_pool
async_compile = AsyncCompile()
empty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p


# kernel path: /tmp/torchinductor_root/tmp2v0drtsa/7d/c7dunodgi5wyqvuqjut4e4mtgdc5veb7d5ckpvlk2oyvatafyx7o.py
# Topologically Sorted Source Nodes: [rms_norm], Original ATen: [aten._fused_rms_norm]
# Source node to ATen node mapping:
#   rms_norm => add, mean, mul, mul_1, pow_1, rsqrt
# Graph fragment:
#   %primals_2 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=primals_2]
#   %buf0 : Tensor "f32[4, 512, 1][512, 1, 2048]cuda:0" = PlaceHolder[target=buf0]
#   %rsqrt : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0" = PlaceHolder[target=rsqrt]
#   %primals_1 : Tensor "f32[256][1]cuda:0" = PlaceHolder[target=primals_1]
#   %pow_1 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%primals_2, 2), kwargs = {})
#   %mean : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mean.dim](args = (%pow_1, [2], True), kwargs = {})
#   %add : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Scalar](args = (%mean, 1.1920928955078125e-07), kwargs = {})
#   %rsqrt : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.rsqrt.default](args = (%add,), kwargs = {})
#   %mul : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%primals_2, %rsqrt), kwargs = {})
#   %mul_1 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul, %primals_1), kwargs = {})
#   return %buf0,%rsqrt,%mul_1
triton_per_fused__fused_rms_norm_0 = async_compile.triton('triton_per_fused__fused_rms_norm_0', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.persistent_reduction(
    size_hints={'x': 2048, 'r0_': 256},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__fused_rms_norm_0', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': False, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 2, 'num_store': 2, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 16384, 'r0_': 6292480}}
)
@triton.jit
def triton_per_fused__fused_rms_norm_0(in_out_ptr0, in_ptr0, in_ptr1, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 2048
    r0_numel = 256
    R0_BLOCK: tl.constexpr = 256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp12 = tl.load(in_ptr1 + (r0_1), None, eviction_policy='evict_last')
    tmp1 = tmp0 * tmp0
    tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
    tmp4 = tl.where(xmask, tmp2, 0)
    tmp5 = tl.sum(tmp4, 1)[:, None].to(tl.float32)
    tmp6 = tl.full([1, 1], 256.0, tl.float32)
    tmp7 = (tmp5 / tmp6)
    tmp8 = tl.full([1, 1], 1.1920928955078125e-07, tl.float32)
    tmp9 = tmp7 + tmp8
    tmp10 = libdevice.rsqrt(tmp9)
    tmp11 = tmp0 * tmp10
    tmp13 = tmp11 * tmp12
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp10, xmask)
    tl.store(out_ptr0 + (r0_1 + 256*x0), tmp13, xmask)
''', device_str='cuda')


# kernel path: /tmp/torchinductor_root/tmp2v0drtsa/ve/cveuvjv6iiyk6v5erk2mlruvtw54uaqwlojc2wfurb6pdg63q6vz.py
# Topologically Sorted Source Nodes: [linear_1, x, rms_norm_1], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm]
# Source node to ATen node mapping:
#   linear_1 => view_5
#   rms_norm_1 => add_2, mean_1, mul_2, mul_3, pow_2, rsqrt_1
#   x => add_1
# Graph fragment:
#   %primals_2 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=primals_2]
#   %mm_1 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_1]
#   %buf22 : Tensor "f32[4, 512, 1][512, 1, 2048]cuda:0" = PlaceHolder[target=buf22]
#   %rsqrt_1 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0" = PlaceHolder[target=rsqrt_1]
#   %primals_5 : Tensor "f32[256][1]cuda:0" = PlaceHolder[target=primals_5]
#   %view_5 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_1, [4, 512, 256]), kwargs = {})
#   %add_1 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%primals_2, %view_5), kwargs = {})
#   %pow_2 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%add_1, 2), kwargs = {})
#   %mean_1 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mean.dim](args = (%pow_2, [2], True), kwargs = {})
#   %add_2 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Scalar](args = (%mean_1, 1.1920928955078125e-07), kwargs = {})
#   %rsqrt_1 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.rsqrt.default](args = (%add_2,), kwargs = {})
#   %mul_2 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%add_1, %rsqrt_1), kwargs = {})
#   %mul_3 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_2, %primals_5), kwargs = {})
#   return %buf22,%rsqrt_1,%mul_3
triton_per_fused__fused_rms_norm__unsafe_view_add_1 = async_compile.triton('triton_per_fused__fused_rms_norm__unsafe_view_add_1', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.persistent_reduction(
    size_hints={'x': 2048, 'r0_': 256},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__fused_rms_norm__unsafe_view_add_1', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': False, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 3, 'num_store': 2, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 16384, 'r0_': 8389632}}
)
@triton.jit
def triton_per_fused__fused_rms_norm__unsafe_view_add_1(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 2048
    r0_numel = 256
    R0_BLOCK: tl.constexpr = 256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp1 = tl.load(in_ptr1 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp14 = tl.load(in_ptr2 + (r0_1), None, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp3 = tmp2 * tmp2
    tmp4 = tl.broadcast_to(tmp3, [XBLOCK, R0_BLOCK])
    tmp6 = tl.where(xmask, tmp4, 0)
    tmp7 = tl.sum(tmp6, 1)[:, None].to(tl.float32)
    tmp8 = tl.full([1, 1], 256.0, tl.float32)
    tmp9 = (tmp7 / tmp8)
    tmp10 = tl.full([1, 1], 1.1920928955078125e-07, tl.float32)
    tmp11 = tmp9 + tmp10
    tmp12 = libdevice.rsqrt(tmp11)
    tmp13 = tmp2 * tmp12
    tmp15 = tmp13 * tmp14
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp12, xmask)
    tl.store(out_ptr0 + (r0_1 + 256*x0), tmp15, xmask)
''', device_str='cuda')


# kernel path: /tmp/torchinductor_root/tmp2v0drtsa/6w/c6whlexsrucu34j7fiwx6zvwe3osvrlhzdl7yvp2sep4vfyqinnh.py
# Topologically Sorted Source Nodes: [linear_2, gelu], Original ATen: [aten._unsafe_view, aten.gelu]
# Source node to ATen node mapping:
#   gelu => add_3, add_4, mul_4, mul_5, mul_6, mul_7, mul_8, mul_9, tanh
#   linear_2 => view_7
# Graph fragment:
#   %mm_2 : Tensor "f32[2048, 1024][1024, 1]cuda:0" = PlaceHolder[target=mm_2]
#   %view_7 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=4] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_2, [4, 512, 1024]), kwargs = {})
#   %mul_4 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%view_7, %view_7), kwargs = {})
#   %mul_5 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_4, %view_7), kwargs = {})
#   %mul_6 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_5, 0.044715), kwargs = {})
#   %add_3 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Tensor](args = (%view_7, %mul_6), kwargs = {})
#   %mul_7 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%add_3, 0.7978845608028654), kwargs = {})
#   %mul_8 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%view_7, 0.5), kwargs = {})
#   %tanh : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.tanh.default](args = (%mul_7,), kwargs = {})
#   %add_4 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Tensor](args = (%tanh, 1), kwargs = {})
#   %mul_9 : Tensor "f32[4, 512, 1024][524288, 1024, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_8, %add_4), kwargs = {})
#   %mul_9_host : Tensor "f32[4, 512, 1024][524288, 1024, 1]cpu"[num_users=2] = call_function[target=torch.ops.offload_pass.offload.default](args = (%mul_9, True, -1, 6907b04842c1, 52510720, 18915328, 8388608), kwargs = {})
#   return %buf30,%mul_9
triton_poi_fused__unsafe_view_gelu_2 = async_compile.triton('triton_poi_fused__unsafe_view_gelu_2', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.pointwise(
    size_hints={'x': 2097152}, 
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*fp32', 'out_ptr0': '*fp32', 'out_ptr1': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_poi_fused__unsafe_view_gelu_2', 'mutated_arg_names': [], 'optimize_mem': False, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 1, 'num_store': 2, 'num_reduction': 0, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 41943040}},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused__unsafe_view_gelu_2(in_ptr0, out_ptr0, out_ptr1, xnumel, XBLOCK : tl.constexpr):
    xnumel = 2097152
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), None)
    tmp1 = tl.full([1], 0.5, tl.float32)
    tmp2 = tmp0 * tmp1
    tmp3 = tmp0 * tmp0
    tmp4 = tmp3 * tmp0
    tmp5 = tl.full([1], 0.044715, tl.float32)
    tmp6 = tmp4 * tmp5
    tmp7 = tmp0 + tmp6
    tmp8 = tl.full([1], 0.7978845608028654, tl.float32)
    tmp9 = tmp7 * tmp8
    tmp10 = libdevice.tanh(tmp9)
    tmp11 = tl.full([1], 1.0, tl.float32)
    tmp12 = tmp10 + tmp11
    tmp13 = tmp2 * tmp12
    tl.store(out_ptr0 + (x0), tmp13, None)
    tl.store(out_ptr1 + (x0), tmp13, None)
''', device_str='cuda')


# kernel path: /tmp/torchinductor_root/tmp2v0drtsa/lx/clxfwywbwzmjb6fmuce73nx7k6f2xztf2mh6sglf6fugifeigois.py
# Topologically Sorted Source Nodes: [linear_1, x, linear_3, x_1, rms_norm_2], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm]
# Source node to ATen node mapping:
#   linear_1 => view_5
#   linear_3 => view_9
#   rms_norm_2 => add_6, mean_2, mul_10, mul_11, pow_3, rsqrt_2
#   x => add_1
#   x_1 => add_5
# Graph fragment:
#   %primals_2 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=primals_2]
#   %mm_1 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_1]
#   %mm_3 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_3]
#   %buf43 : Tensor "f32[4, 512, 1][512, 1, 2048]cuda:0" = PlaceHolder[target=buf43]
#   %rsqrt_2 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0" = PlaceHolder[target=rsqrt_2]
#   %mul_10 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=mul_10]
#   %primals_8 : Tensor "f32[256][1]cuda:0" = PlaceHolder[target=primals_8]
#   %view_5 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_1, [4, 512, 256]), kwargs = {})
#   %add_1 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%primals_2, %view_5), kwargs = {})
#   %view_9 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_3, [4, 512, 256]), kwargs = {})
#   %add_5 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%add_1, %view_9), kwargs = {})
#   %pow_3 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%add_5, 2), kwargs = {})
#   %mean_2 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mean.dim](args = (%pow_3, [2], True), kwargs = {})
#   %add_6 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Scalar](args = (%mean_2, 1.1920928955078125e-07), kwargs = {})
#   %rsqrt_2 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.rsqrt.default](args = (%add_6,), kwargs = {})
#   %mul_10 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.mul.Tensor](args = (%add_5, %rsqrt_2), kwargs = {})
#   %mul_11 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_10, %primals_8), kwargs = {})
#   return %buf43,%rsqrt_2,%mul_10,%mul_11
triton_per_fused__fused_rms_norm__unsafe_view_add_3 = async_compile.triton('triton_per_fused__fused_rms_norm__unsafe_view_add_3', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.persistent_reduction(
    size_hints={'x': 2048, 'r0_': 256},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'out_ptr0': '*fp32', 'out_ptr1': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__fused_rms_norm__unsafe_view_add_3', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': False, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 4, 'num_store': 3, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 16384, 'r0_': 14681088}}
)
@triton.jit
def triton_per_fused__fused_rms_norm__unsafe_view_add_3(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, out_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 2048
    r0_numel = 256
    R0_BLOCK: tl.constexpr = 256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp1 = tl.load(in_ptr1 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp3 = tl.load(in_ptr2 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp16 = tl.load(in_ptr3 + (r0_1), None, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp4 = tmp2 + tmp3
    tmp5 = tmp4 * tmp4
    tmp6 = tl.broadcast_to(tmp5, [XBLOCK, R0_BLOCK])
    tmp8 = tl.where(xmask, tmp6, 0)
    tmp9 = tl.sum(tmp8, 1)[:, None].to(tl.float32)
    tmp10 = tl.full([1, 1], 256.0, tl.float32)
    tmp11 = (tmp9 / tmp10)
    tmp12 = tl.full([1, 1], 1.1920928955078125e-07, tl.float32)
    tmp13 = tmp11 + tmp12
    tmp14 = libdevice.rsqrt(tmp13)
    tmp15 = tmp4 * tmp14
    tmp17 = tmp15 * tmp16
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp14, xmask)
    tl.store(out_ptr0 + (r0_1 + 256*x0), tmp15, xmask)
    tl.store(out_ptr1 + (r0_1 + 256*x0), tmp17, xmask)
''', device_str='cuda')


# kernel path: /tmp/torchinductor_root/tmp2v0drtsa/3p/c3p3gc4o44p4slkvfuzopw5jw73nkragph5wat4itjdk3cfrvpii.py
# Topologically Sorted Source Nodes: [linear_1, x, linear_3, x_1, linear_5, x_2, rms_norm_3], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm]
# Source node to ATen node mapping:
#   linear_1 => view_5
#   linear_3 => view_9
#   linear_5 => view_15
#   rms_norm_3 => add_8, mean_3, mul_12, mul_13, pow_4, rsqrt_3
#   x => add_1
#   x_1 => add_5
#   x_2 => add_7
# Graph fragment:
#   %primals_2 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=primals_2]
#   %mm_1 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_1]
#   %mm_3 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_3]
#   %mm_5 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_5]
#   %buf70 : Tensor "f32[4, 512, 1][512, 1, 2048]cuda:0" = PlaceHolder[target=buf70]
#   %rsqrt_3 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0" = PlaceHolder[target=rsqrt_3]
#   %mul_12 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=mul_12]
#   %primals_11 : Tensor "f32[256][1]cuda:0" = PlaceHolder[target=primals_11]
#   %view_5 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_1, [4, 512, 256]), kwargs = {})
#   %add_1 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%primals_2, %view_5), kwargs = {})
#   %view_9 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_3, [4, 512, 256]), kwargs = {})
#   %add_5 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%add_1, %view_9), kwargs = {})
#   %view_15 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_5, [4, 512, 256]), kwargs = {})
#   %add_7 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%add_5, %view_15), kwargs = {})
#   %pow_4 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%add_7, 2), kwargs = {})
#   %mean_3 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mean.dim](args = (%pow_4, [2], True), kwargs = {})
#   %add_8 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Scalar](args = (%mean_3, 1.1920928955078125e-07), kwargs = {})
#   %rsqrt_3 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.rsqrt.default](args = (%add_8,), kwargs = {})
#   %mul_12 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.mul.Tensor](args = (%add_7, %rsqrt_3), kwargs = {})
#   %mul_13 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_12, %primals_11), kwargs = {})
#   return %buf70,%rsqrt_3,%mul_12,%mul_13
triton_per_fused__fused_rms_norm__unsafe_view_add_4 = async_compile.triton('triton_per_fused__fused_rms_norm__unsafe_view_add_4', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.persistent_reduction(
    size_hints={'x': 2048, 'r0_': 256},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'in_ptr4': '*fp32', 'out_ptr0': '*fp32', 'out_ptr1': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__fused_rms_norm__unsafe_view_add_4', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': False, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 5, 'num_store': 3, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 16384, 'r0_': 16778240}}
)
@triton.jit
def triton_per_fused__fused_rms_norm__unsafe_view_add_4(in_out_ptr0, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 2048
    r0_numel = 256
    R0_BLOCK: tl.constexpr = 256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp1 = tl.load(in_ptr1 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp3 = tl.load(in_ptr2 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp5 = tl.load(in_ptr3 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp18 = tl.load(in_ptr4 + (r0_1), None, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp4 = tmp2 + tmp3
    tmp6 = tmp4 + tmp5
    tmp7 = tmp6 * tmp6
    tmp8 = tl.broadcast_to(tmp7, [XBLOCK, R0_BLOCK])
    tmp10 = tl.where(xmask, tmp8, 0)
    tmp11 = tl.sum(tmp10, 1)[:, None].to(tl.float32)
    tmp12 = tl.full([1, 1], 256.0, tl.float32)
    tmp13 = (tmp11 / tmp12)
    tmp14 = tl.full([1, 1], 1.1920928955078125e-07, tl.float32)
    tmp15 = tmp13 + tmp14
    tmp16 = libdevice.rsqrt(tmp15)
    tmp17 = tmp6 * tmp16
    tmp19 = tmp17 * tmp18
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp16, xmask)
    tl.store(out_ptr0 + (r0_1 + 256*x0), tmp17, xmask)
    tl.store(out_ptr1 + (r0_1 + 256*x0), tmp19, xmask)
''', device_str='cuda')


# kernel path: /tmp/torchinductor_root/tmp2v0drtsa/jt/cjtarzw5sd2mqu5pnj7rjvzeajivezyxs2yel7fpay6xeo2ci3yl.py
# Topologically Sorted Source Nodes: [linear_1, x, linear_3, x_1, linear_5, x_2, linear_7, x_3, rms_norm_4, pow_1, mean], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm, aten.pow, aten.mean]
# Source node to ATen node mapping:
#   linear_1 => view_5
#   linear_3 => view_9
#   linear_5 => view_15
#   linear_7 => view_19
#   mean => mean_5
#   pow_1 => pow_6
#   rms_norm_4 => add_12, mean_4, mul_20, mul_21, pow_5, rsqrt_4
#   x => add_1
#   x_1 => add_5
#   x_2 => add_7
#   x_3 => add_11
# Graph fragment:
#   %primals_2 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=primals_2]
#   %mm_1 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_1]
#   %mm_3 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_3]
#   %mm_5 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_5]
#   %mm_7 : Tensor "f32[2048, 256][256, 1]cuda:0" = PlaceHolder[target=mm_7]
#   %add_11 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=add_11]
#   %buf95 : Tensor "f32[4, 512, 1][512, 1, 2048]cuda:0" = PlaceHolder[target=buf95]
#   %rsqrt_4 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0" = PlaceHolder[target=rsqrt_4]
#   %mul_20 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0" = PlaceHolder[target=mul_20]
#   %primals_14 : Tensor "f32[256][1]cuda:0" = PlaceHolder[target=primals_14]
#   %view_5 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_1, [4, 512, 256]), kwargs = {})
#   %add_1 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%primals_2, %view_5), kwargs = {})
#   %view_9 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_3, [4, 512, 256]), kwargs = {})
#   %add_5 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%add_1, %view_9), kwargs = {})
#   %view_15 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_5, [4, 512, 256]), kwargs = {})
#   %add_7 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=3] = call_function[target=torch.ops.aten.add.Tensor](args = (%add_5, %view_15), kwargs = {})
#   %view_19 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.reshape.default](args = (%mm_7, [4, 512, 256]), kwargs = {})
#   %add_11 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.add.Tensor](args = (%add_7, %view_19), kwargs = {})
#   %pow_5 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%add_11, 2), kwargs = {})
#   %mean_4 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mean.dim](args = (%pow_5, [2], True), kwargs = {})
#   %add_12 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Scalar](args = (%mean_4, 1.1920928955078125e-07), kwargs = {})
#   %rsqrt_4 : Tensor "f32[4, 512, 1][512, 1, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.rsqrt.default](args = (%add_12,), kwargs = {})
#   %mul_20 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.mul.Tensor](args = (%add_11, %rsqrt_4), kwargs = {})
#   %mul_21 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_20, %primals_14), kwargs = {})
#   %pow_6 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%mul_21, 2), kwargs = {})
#   %mean_5 : Tensor "f32[][]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mean.default](args = (%pow_6,), kwargs = {})
#   return %add_11,%buf95,%rsqrt_4,%mul_20,%buf98
triton_per_fused__fused_rms_norm__unsafe_view_add_mean_pow_5 = async_compile.triton('triton_per_fused__fused_rms_norm__unsafe_view_add_mean_pow_5', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.persistent_reduction(
    size_hints={'x': 2048, 'r0_': 256},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_out_ptr1': '*fp32', 'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'in_ptr4': '*fp32', 'out_ptr0': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]], (9,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused__fused_rms_norm__unsafe_view_add_mean_pow_5', 'mutated_arg_names': ['in_out_ptr0', 'in_out_ptr1'], 'optimize_mem': False, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 6, 'num_store': 3, 'num_reduction': 2, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'x': 32768, 'r0_': 14681088}}
)
@triton.jit
def triton_per_fused__fused_rms_norm__unsafe_view_add_mean_pow_5(in_out_ptr0, in_out_ptr1, in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 2048
    r0_numel = 256
    R0_BLOCK: tl.constexpr = 256
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp1 = tl.load(in_out_ptr0 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp3 = tl.load(in_ptr1 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp5 = tl.load(in_ptr2 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp7 = tl.load(in_ptr3 + (r0_1 + 256*x0), xmask, other=0.0)
    tmp20 = tl.load(in_ptr4 + (r0_1), None, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp4 = tmp2 + tmp3
    tmp6 = tmp4 + tmp5
    tmp8 = tmp6 + tmp7
    tmp9 = tmp8 * tmp8
    tmp10 = tl.broadcast_to(tmp9, [XBLOCK, R0_BLOCK])
    tmp12 = tl.where(xmask, tmp10, 0)
    tmp13 = tl.sum(tmp12, 1)[:, None].to(tl.float32)
    tmp14 = tl.full([1, 1], 256.0, tl.float32)
    tmp15 = (tmp13 / tmp14)
    tmp16 = tl.full([1, 1], 1.1920928955078125e-07, tl.float32)
    tmp17 = tmp15 + tmp16
    tmp18 = libdevice.rsqrt(tmp17)
    tmp19 = tmp8 * tmp18
    tmp21 = tmp19 * tmp20
    tmp22 = tmp21 * tmp21
    tmp23 = tl.broadcast_to(tmp22, [XBLOCK, R0_BLOCK])
    tmp25 = tl.where(xmask, tmp23, 0)
    tmp26 = tl.sum(tmp25, 1)[:, None].to(tl.float32)
    tl.debug_barrier()
    tl.store(in_out_ptr1 + (x0), tmp18, xmask)
    tl.store(in_out_ptr0 + (r0_1 + 256*x0), tmp19, xmask)
    tl.store(out_ptr0 + (x0), tmp26, xmask)
''', device_str='cuda')


# kernel path: /tmp/torchinductor_root/tmp2v0drtsa/iw/ciw7qgp222hok2kj7mgxvaxxdqyfr64dqpnitlz5qsytwdszczwi.py
# Topologically Sorted Source Nodes: [rms_norm_4, pow_1, mean], Original ATen: [aten._fused_rms_norm, aten.pow, aten.mean]
# Source node to ATen node mapping:
#   mean => mean_5
#   pow_1 => pow_6
#   rms_norm_4 => mul_21
# Graph fragment:
#   %buf98 : Tensor "f32[4, 512, 1][512, 1, 2048]cuda:0" = PlaceHolder[target=buf98]
#   %buf99 : Tensor "f32[][]cuda:0" = PlaceHolder[target=buf99]
#   %mul_21 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_20, %primals_14), kwargs = {})
#   %pow_6 : Tensor "f32[4, 512, 256][131072, 256, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%mul_21, 2), kwargs = {})
#   %mean_5 : Tensor "f32[][]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mean.default](args = (%pow_6,), kwargs = {})
#   return %buf99,%mean_5
triton_red_fused__fused_rms_norm_mean_pow_6 = async_compile.triton('triton_red_fused__fused_rms_norm_mean_pow_6', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.reduction(
    size_hints={'x': 1, 'r0_': 2048},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'in_ptr0': '*fp32', 'xnumel': 'constexpr', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'R0_BLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {'xnumel': 1}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'Grid1D', 'autotune_hints': set(), 'kernel_name': 'triton_red_fused__fused_rms_norm_mean_pow_6', 'mutated_arg_names': ['in_out_ptr0'], 'optimize_mem': False, 'no_x_dim': False, 'atomic_add_found': False, 'num_load': 1, 'num_store': 1, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': True, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'tiling_scores': {'r0_': 8192}}
)
@triton.jit
def triton_red_fused__fused_rms_norm_mean_pow_6(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 1
    r0_numel = 2048
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_0 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp3 = _tmp2 + tmp1
        _tmp2 = tl.where(r0_mask, tmp3, _tmp2)
    tmp2 = tl.sum(_tmp2, 1)[:, None]
    tmp4 = tl.full([1, 1], 524288.0, tl.float32)
    tmp5 = (tmp2 / tmp4)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (tl.full([1, 1], 0, tl.int32).broadcast_to(XBLOCK, 1)), tmp5, None)
''', device_str='cuda')


async_compile.wait(globals())
del async_compile

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def recursively_apply_fns(self, fns):
        new_callables = []
        for fn, c in zip(fns, self.partitions):
            new_callables.append(fn(c))
        self.partitions = new_callables

    def call(self, args):
        primals_1, primals_2, primals_3, primals_4, primals_5, primals_6, primals_7, primals_8, primals_9, primals_10, primals_11, primals_12, primals_13, primals_14 = args
        args.clear()
        assert_size_stride(primals_1, (256, ), (1, ))
        assert_size_stride(primals_2, (4, 512, 256), (131072, 256, 1))
        assert_size_stride(primals_3, (768, 256), (256, 1))
        assert_size_stride(primals_4, (256, 256), (256, 1))
        assert_size_stride(primals_5, (256, ), (1, ))
        assert_size_stride(primals_6, (1024, 256), (256, 1))
        assert_size_stride(primals_7, (256, 1024), (1024, 1))
        assert_size_stride(primals_8, (256, ), (1, ))
        assert_size_stride(primals_9, (768, 256), (256, 1))
        assert_size_stride(primals_10, (256, 256), (256, 1))
        assert_size_stride(primals_11, (256, ), (1, ))
        assert_size_stride(primals_12, (1024, 256), (256, 1))
        assert_size_stride(primals_13, (256, 1024), (1024, 1))
        assert_size_stride(primals_14, (256, ), (1, ))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((4, 512, 1), (512, 1, 2048), torch.float32)
            buf1 = reinterpret_tensor(buf0, (4, 512, 1), (512, 1, 1), 0); del buf0  # reuse
            buf2 = empty_strided_cuda((4, 512, 256), (131072, 256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [rms_norm], Original ATen: [aten._fused_rms_norm]
            stream0 = get_raw_stream(0)
            triton_per_fused__fused_rms_norm_0.run(buf1, primals_2, primals_1, buf2, 2048, 256, stream=stream0)
            del primals_1
            buf3 = empty_strided_cuda((2048, 768), (768, 1), torch.float32)
            # Topologically Sorted Source Nodes: [rms_norm, linear], Original ATen: [aten._fused_rms_norm, aten.t, aten.view, aten.mm]
            extern_kernels.mm(reinterpret_tensor(buf2, (2048, 256), (256, 1), 0), reinterpret_tensor(primals_3, (256, 768), (1, 256), 0), out=buf3)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf4 = torch.ops.offload_pass.offload.default(buf3, True, -1, '6907b04842c1', 52510720, 0, 6291456)
        buf5 = buf4
        assert_size_stride(buf5, (2048, 768), (768, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf5, 16, 'torch.ops.offload_pass.offload.default')
        del buf4
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [linear, view, unbind, transpose, transpose_1, transpose_2, out], Original ATen: [aten._unsafe_view, aten.view, aten.unbind, aten.transpose, aten._scaled_dot_product_efficient_attention]
            buf6 = torch.ops.aten._scaled_dot_product_efficient_attention.default(reinterpret_tensor(buf3, (4, 4, 512, 64), (393216, 64, 768, 1), 0), reinterpret_tensor(buf3, (4, 4, 512, 64), (393216, 64, 768, 1), 256), reinterpret_tensor(buf3, (4, 4, 512, 64), (393216, 64, 768, 1), 512), None, True, 0.0, True)
            buf7 = buf6[0]
            assert_size_stride(buf7, (4, 4, 512, 64), (131072, 64, 256, 1), 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            assert_alignment(buf7, 16, 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            buf8 = buf6[1]
            assert_size_stride(buf8, (4, 4, 512), (2048, 512, 1), 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            assert_alignment(buf8, 16, 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            buf9 = buf6[2]
            assert_size_stride(buf9, (), (), 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            assert_alignment(buf9, 16, 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            buf10 = buf6[3]
            assert_size_stride(buf10, (), (), 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            assert_alignment(buf10, 16, 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            del buf6
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf11 = torch.ops.offload_pass.offload.default(buf7, True, -1, '6907b04842c1', 52510720, 6291456, 2097152)
        buf12 = buf11
        assert_size_stride(buf12, (4, 4, 512, 64), (131072, 64, 256, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf12, 16, 'torch.ops.offload_pass.offload.default')
        del buf11
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf13 = torch.ops.offload_pass.offload.default(buf8, True, -1, '6907b04842c1', 52510720, 8388608, 32768)
        buf14 = buf13
        assert_size_stride(buf14, (4, 4, 512), (2048, 512, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf14, 16, 'torch.ops.offload_pass.offload.default')
        del buf13
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf15 = torch.ops.offload_pass.offload.default(buf9, True, -1, '6907b04842c1', 52510720, 8421376, 4096)
        buf16 = buf15
        assert_size_stride(buf16, (), (), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf16, 16, 'torch.ops.offload_pass.offload.default')
        del buf15
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf17 = torch.ops.offload_pass.offload.default(buf10, True, -1, '6907b04842c1', 52510720, 8425472, 4096)
        buf18 = buf17
        assert_size_stride(buf18, (), (), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf18, 16, 'torch.ops.offload_pass.offload.default')
        del buf17
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf19 = empty_strided_cuda((2048, 256), (256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [transpose_3, reshape, linear_1], Original ATen: [aten.transpose, aten.view, aten.t, aten.mm]
            extern_kernels.mm(reinterpret_tensor(buf7, (2048, 256), (256, 1), 0), reinterpret_tensor(primals_4, (256, 256), (1, 256), 0), out=buf19)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf20 = torch.ops.offload_pass.offload.default(buf19, True, -1, '6907b04842c1', 52510720, 8429568, 2097152)
        buf21 = buf20
        assert_size_stride(buf21, (2048, 256), (256, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf21, 16, 'torch.ops.offload_pass.offload.default')
        del buf20
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf22 = empty_strided_cuda((4, 512, 1), (512, 1, 2048), torch.float32)
            buf23 = reinterpret_tensor(buf22, (4, 512, 1), (512, 1, 1), 0); del buf22  # reuse
            buf24 = empty_strided_cuda((4, 512, 256), (131072, 256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear_1, x, rms_norm_1], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm]
            stream0 = get_raw_stream(0)
            triton_per_fused__fused_rms_norm__unsafe_view_add_1.run(buf23, primals_2, buf19, primals_5, buf24, 2048, 256, stream=stream0)
            buf25 = empty_strided_cuda((2048, 1024), (1024, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear_1, x, rms_norm_1, linear_2], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm, aten.t, aten.view, aten.mm]
            extern_kernels.mm(reinterpret_tensor(buf24, (2048, 256), (256, 1), 0), reinterpret_tensor(primals_6, (256, 1024), (1, 256), 0), out=buf25)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf3, buf5)
            del buf3
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf28 = torch.ops.offload_pass.offload.default(buf25, True, -1, '6907b04842c1', 52510720, 10526720, 8388608)
        buf29 = buf28
        assert_size_stride(buf29, (2048, 1024), (1024, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf29, 16, 'torch.ops.offload_pass.offload.default')
        del buf28
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf30 = empty_strided_cuda((4, 512, 1024), (524288, 1024, 1), torch.float32)
            buf33 = empty_strided_cuda((4, 512, 1024), (524288, 1024, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear_2, gelu], Original ATen: [aten._unsafe_view, aten.gelu]
            stream0 = get_raw_stream(0)
            triton_poi_fused__unsafe_view_gelu_2.run(buf25, buf30, buf33, 2097152, stream=stream0)
            # Topologically Sorted Source Nodes: [linear_2, gelu], Original ATen: [aten._unsafe_view, aten.gelu]
            buf31 = torch.ops.offload_pass.offload.default(buf30, True, -1, '6907b04842c1', 52510720, 18915328, 8388608)
            del buf30
        buf32 = buf31
        assert_size_stride(buf32, (4, 512, 1024), (524288, 1024, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf32, 16, 'torch.ops.offload_pass.offload.default')
        del buf31
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf34 = empty_strided_cuda((2048, 256), (256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear_2, gelu, linear_3], Original ATen: [aten._unsafe_view, aten.gelu, aten.t, aten.view, aten.mm]
            extern_kernels.mm(reinterpret_tensor(buf33, (2048, 1024), (1024, 1), 0), reinterpret_tensor(primals_7, (1024, 256), (1, 1024), 0), out=buf34)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf10, buf18)
            del buf10
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf9, buf16)
            del buf9
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf8, buf14)
            del buf8
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf7, buf12)
            del buf7
            buf43 = empty_strided_cuda((4, 512, 1), (512, 1, 2048), torch.float32)
            buf44 = reinterpret_tensor(buf43, (4, 512, 1), (512, 1, 1), 0); del buf43  # reuse
            buf45 = empty_strided_cuda((4, 512, 256), (131072, 256, 1), torch.float32)
            buf46 = empty_strided_cuda((4, 512, 256), (131072, 256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear_1, x, linear_3, x_1, rms_norm_2], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm]
            stream0 = get_raw_stream(0)
            triton_per_fused__fused_rms_norm__unsafe_view_add_3.run(buf44, primals_2, buf19, buf34, primals_8, buf45, buf46, 2048, 256, stream=stream0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf25, buf29)
            del buf25
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf19, buf21)
            buf51 = empty_strided_cuda((2048, 768), (768, 1), torch.float32)
            # Topologically Sorted Source Nodes: [rms_norm_2, linear_4], Original ATen: [aten._fused_rms_norm, aten.t, aten.view, aten.mm]
            extern_kernels.mm(reinterpret_tensor(buf46, (2048, 256), (256, 1), 0), reinterpret_tensor(primals_9, (256, 768), (1, 256), 0), out=buf51)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf52 = torch.ops.offload_pass.offload.default(buf51, True, -1, '6907b04842c1', 52510720, 27303936, 6291456)
        buf53 = buf52
        assert_size_stride(buf53, (2048, 768), (768, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf53, 16, 'torch.ops.offload_pass.offload.default')
        del buf52
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [linear_4, view_1, unbind_1, transpose_4, transpose_5, transpose_6, out_1], Original ATen: [aten._unsafe_view, aten.view, aten.unbind, aten.transpose, aten._scaled_dot_product_efficient_attention]
            buf54 = torch.ops.aten._scaled_dot_product_efficient_attention.default(reinterpret_tensor(buf51, (4, 4, 512, 64), (393216, 64, 768, 1), 0), reinterpret_tensor(buf51, (4, 4, 512, 64), (393216, 64, 768, 1), 256), reinterpret_tensor(buf51, (4, 4, 512, 64), (393216, 64, 768, 1), 512), None, True, 0.0, True)
            buf55 = buf54[0]
            assert_size_stride(buf55, (4, 4, 512, 64), (131072, 64, 256, 1), 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            assert_alignment(buf55, 16, 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            buf56 = buf54[1]
            assert_size_stride(buf56, (4, 4, 512), (2048, 512, 1), 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            assert_alignment(buf56, 16, 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            buf57 = buf54[2]
            assert_size_stride(buf57, (), (), 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            assert_alignment(buf57, 16, 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            buf58 = buf54[3]
            assert_size_stride(buf58, (), (), 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            assert_alignment(buf58, 16, 'torch.ops.aten._scaled_dot_product_efficient_attention.default')
            del buf54
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf59 = torch.ops.offload_pass.offload.default(buf55, True, -1, '6907b04842c1', 52510720, 33595392, 2097152)
        buf60 = buf59
        assert_size_stride(buf60, (4, 4, 512, 64), (131072, 64, 256, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf60, 16, 'torch.ops.offload_pass.offload.default')
        del buf59
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf61 = torch.ops.offload_pass.offload.default(buf56, True, -1, '6907b04842c1', 52510720, 35692544, 32768)
        buf62 = buf61
        assert_size_stride(buf62, (4, 4, 512), (2048, 512, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf62, 16, 'torch.ops.offload_pass.offload.default')
        del buf61
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf63 = torch.ops.offload_pass.offload.default(buf57, True, -1, '6907b04842c1', 52510720, 35725312, 4096)
        buf64 = buf63
        assert_size_stride(buf64, (), (), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf64, 16, 'torch.ops.offload_pass.offload.default')
        del buf63
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf65 = torch.ops.offload_pass.offload.default(buf58, True, -1, '6907b04842c1', 52510720, 35729408, 4096)
        buf66 = buf65
        assert_size_stride(buf66, (), (), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf66, 16, 'torch.ops.offload_pass.offload.default')
        del buf65
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf67 = empty_strided_cuda((2048, 256), (256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [transpose_7, reshape_1, linear_5], Original ATen: [aten.transpose, aten.view, aten.t, aten.mm]
            extern_kernels.mm(reinterpret_tensor(buf55, (2048, 256), (256, 1), 0), reinterpret_tensor(primals_10, (256, 256), (1, 256), 0), out=buf67)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf33, buf32)
            del buf33
            buf70 = empty_strided_cuda((4, 512, 1), (512, 1, 2048), torch.float32)
            buf71 = reinterpret_tensor(buf70, (4, 512, 1), (512, 1, 1), 0); del buf70  # reuse
            buf72 = empty_strided_cuda((4, 512, 256), (131072, 256, 1), torch.float32)
            buf73 = empty_strided_cuda((4, 512, 256), (131072, 256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear_1, x, linear_3, x_1, linear_5, x_2, rms_norm_3], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm]
            stream0 = get_raw_stream(0)
            triton_per_fused__fused_rms_norm__unsafe_view_add_4.run(buf71, primals_2, buf19, buf34, buf67, primals_11, buf72, buf73, 2048, 256, stream=stream0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf51, buf53)
            del buf51
            buf76 = empty_strided_cuda((2048, 1024), (1024, 1), torch.float32)
            # Topologically Sorted Source Nodes: [rms_norm_3, linear_6], Original ATen: [aten._fused_rms_norm, aten.t, aten.view, aten.mm]
            extern_kernels.mm(reinterpret_tensor(buf73, (2048, 256), (256, 1), 0), reinterpret_tensor(primals_12, (256, 1024), (1, 256), 0), out=buf76)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf58, buf66)
            del buf58
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf57, buf64)
            del buf57
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf56, buf62)
            del buf56
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf55, buf60)
            del buf55
            # Topologically Sorted Source Nodes: [], Original ATen: []
            buf85 = torch.ops.offload_pass.offload.default(buf76, True, -1, '6907b04842c1', 52510720, 35733504, 8388608)
        buf86 = buf85
        assert_size_stride(buf86, (2048, 1024), (1024, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf86, 16, 'torch.ops.offload_pass.offload.default')
        del buf85
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf87 = empty_strided_cuda((4, 512, 1024), (524288, 1024, 1), torch.float32)
            buf92 = empty_strided_cuda((4, 512, 1024), (524288, 1024, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear_6, gelu_1], Original ATen: [aten._unsafe_view, aten.gelu]
            stream0 = get_raw_stream(0)
            triton_poi_fused__unsafe_view_gelu_2.run(buf76, buf87, buf92, 2097152, stream=stream0)
            # Topologically Sorted Source Nodes: [linear_6, gelu_1], Original ATen: [aten._unsafe_view, aten.gelu]
            buf88 = torch.ops.offload_pass.offload.default(buf87, True, -1, '6907b04842c1', 52510720, 44122112, 8388608)
            del buf87
        buf89 = buf88
        assert_size_stride(buf89, (4, 512, 1024), (524288, 1024, 1), 'torch.ops.offload_pass.offload.default')
        assert_alignment(buf89, 16, 'torch.ops.offload_pass.offload.default')
        del buf88
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf76, buf86)
            del buf76
            buf93 = empty_strided_cuda((2048, 256), (256, 1), torch.float32)
            # Topologically Sorted Source Nodes: [linear_6, gelu_1, linear_7], Original ATen: [aten._unsafe_view, aten.gelu, aten.t, aten.view, aten.mm]
            extern_kernels.mm(reinterpret_tensor(buf92, (2048, 1024), (1024, 1), 0), reinterpret_tensor(primals_13, (1024, 256), (1, 1024), 0), out=buf93)
            buf94 = reinterpret_tensor(buf19, (4, 512, 256), (131072, 256, 1), 0); del buf19  # reuse
            buf95 = empty_strided_cuda((4, 512, 1), (512, 1, 2048), torch.float32)
            buf96 = reinterpret_tensor(buf95, (4, 512, 1), (512, 1, 1), 0); del buf95  # reuse
            buf97 = buf94; del buf94  # reuse
            buf98 = empty_strided_cuda((4, 512, 1), (512, 1, 2048), torch.float32)
            # Topologically Sorted Source Nodes: [linear_1, x, linear_3, x_1, linear_5, x_2, linear_7, x_3, rms_norm_4, pow_1, mean], Original ATen: [aten._unsafe_view, aten.add, aten._fused_rms_norm, aten.pow, aten.mean]
            stream0 = get_raw_stream(0)
            triton_per_fused__fused_rms_norm__unsafe_view_add_mean_pow_5.run(buf97, buf96, primals_2, buf34, buf67, buf93, primals_14, buf98, 2048, 256, stream=stream0)
            del buf34
            del buf67
            del buf93
            buf99 = empty_strided_cuda((), (), torch.float32)
            buf102 = buf99; del buf99  # reuse
            # Topologically Sorted Source Nodes: [rms_norm_4, pow_1, mean], Original ATen: [aten._fused_rms_norm, aten.pow, aten.mean]
            stream0 = get_raw_stream(0)
            triton_red_fused__fused_rms_norm_mean_pow_6.run(buf102, buf98, 1, 2048, stream=stream0)
            del buf98
            # Topologically Sorted Source Nodes: [], Original ATen: []
            torch.ops.offload_pass.release.default(buf92, buf89)
            del buf92
        return (buf102, primals_2, primals_3, primals_4, primals_5, primals_6, primals_7, primals_8, primals_9, primals_10, primals_11, primals_12, primals_13, primals_14, buf1, reinterpret_tensor(buf2, (2048, 256), (256, 1), 0), buf5, buf5, buf5, buf12, buf14, buf16, buf18, buf21, buf23, reinterpret_tensor(buf24, (2048, 256), (256, 1), 0), buf29, buf32, buf44, buf45, reinterpret_tensor(buf46, (2048, 256), (256, 1), 0), buf53, buf53, buf53, buf60, buf62, buf64, buf66, buf71, buf72, reinterpret_tensor(buf73, (2048, 256), (256, 1), 0), buf86, buf89, buf96, buf97, )

runner = Runner(partitions=[])
call = runner.call
recursively_apply_fns = runner.recursively_apply_fns


def get_args():
    from torch._dynamo.testing import rand_strided
    primals_1 = rand_strided((256, ), (1, ), device='cuda:0', dtype=torch.float32)
    primals_2 = rand_strided((4, 512, 256), (131072, 256, 1), device='cuda:0', dtype=torch.float32)
    primals_3 = rand_strided((768, 256), (256, 1), device='cuda:0', dtype=torch.float32)
    primals_4 = rand_strided((256, 256), (256, 1), device='cuda:0', dtype=torch.float32)
    primals_5 = rand_strided((256, ), (1, ), device='cuda:0', dtype=torch.float32)
    primals_6 = rand_strided((1024, 256), (256, 1), device='cuda:0', dtype=torch.float32)
    primals_7 = rand_strided((256, 1024), (1024, 1), device='cuda:0', dtype=torch.float32)
    primals_8 = rand_strided((256, ), (1, ), device='cuda:0', dtype=torch.float32)
    primals_9 = rand_strided((768, 256), (256, 1), device='cuda:0', dtype=torch.float32)
    primals_10 = rand_strided((256, 256), (256, 1), device='cuda:0', dtype=torch.float32)
    primals_11 = rand_strided((256, ), (1, ), device='cuda:0', dtype=torch.float32)
    primals_12 = rand_strided((1024, 256), (256, 1), device='cuda:0', dtype=torch.float32)
    primals_13 = rand_strided((256, 1024), (1024, 1), device='cuda:0', dtype=torch.float32)
    primals_14 = rand_strided((256, ), (1, ), device='cuda:0', dtype=torch.float32)
    return [primals_1, primals_2, primals_3, primals_4, primals_5, primals_6, primals_7, primals_8, primals_9, primals_10, primals_11, primals_12, primals_13, primals_14]


def benchmark_compiled_module(args, times=10, repeat=10):
    from torch._inductor.utils import print_performance
    fn = lambda: call(list(args))
    return print_performance(fn, times=times, repeat=repeat)


if __name__ == "__main__":
    from torch._inductor.wrapper_benchmark import compiled_module_main
    args = get_args()
    compiled_module_main('None', lambda times, repeat: benchmark_compiled_module(args, times=times, repeat=repeat))
