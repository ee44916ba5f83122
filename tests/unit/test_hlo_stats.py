"""benchmarks/hlo_stats.py counts the kernels of one scan iteration by its documented rule: on hand-written HLO text (every
rule, exact numbers) and on a jitted scan with a known number of unfusable ops. Its count of main.py's training step
is tested with the optimizer layouts (tests/agents/test_update_equivalence.py), where compiling it belongs."""

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.hlo_stats import HloModule, count_kernels, main_loop, module_stats, program_stats

HLO = """HloModule test, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

FileNames
1 "/work/main/utils/training.py"
2 "/work/main/.venv/lib/python3.11/site-packages/optax/_src/transform.py"

FunctionNames
1 "sample_batch"
2 "scale_by_adam.<locals>.update_fn"

FileLocations
1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=1 end_column=2}
2 {file_name_id=2 function_name_id=2 line=20 end_line=20 column=1 end_column=2}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}

%fused_add (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %a = f32[8]{0} add(%p, %p)
}

%fused_dot (p: f32[8], q: f32[8,8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %q = f32[8,8]{1,0} parameter(1)
  ROOT %d = f32[8]{0} dot(%p, %q), lhs_contracting_dims={0}, rhs_contracting_dims={0}
}

%inner_body (t: (s32[], f32[8])) -> (s32[], f32[8]) {
  %t = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[8]{0} get-tuple-element(%t), index=1
  %f = f32[8]{0} fusion(%x), kind=kLoop, calls=%fused_add, metadata={op_name="jit(f)/threefry2x32" stack_frame_id=1}
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[8]{0}) tuple(%j, %f)
}

%inner_cond (t: (s32[], f32[8])) -> pred[] {
  %t = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%branch_a (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  ROOT %c = f32[8]{0} copy(%x)
}

%branch_b (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %c1 = f32[8]{0} copy(%x)
  ROOT %c2 = f32[8]{0} sort(%c1), dimensions={0}, to_apply=%fused_add
}

%callee (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%x)
}

%body (t: (s32[], f32[8], f32[8,8])) -> (s32[], f32[8], f32[8,8]) {
  %t = (s32[], f32[8]{0}, f32[8,8]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[8]{0} get-tuple-element(%t), index=1
  %w = f32[8,8]{1,0} get-tuple-element(%t), index=2
  %g = f32[8]{0} fusion(%x, %w), kind=kOutput, calls=%fused_dot, metadata={op_name="jit(f)/adam/mul" stack_frame_id=2}
  %cc = f32[8]{0} custom-call(%g), custom_call_target="__cublas$gemm"
  %b = f32[8]{0} bitcast(%cc)
  %zero = s32[] constant(0)
  %it = (s32[], f32[8]{0}) tuple(%zero, %b)
  %loop = (s32[], f32[8]{0}) while(%it), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"3"}}
  %y = f32[8]{0} get-tuple-element(%loop), index=1
  %p = pred[] constant(true)
  %k = f32[8]{0} conditional(%p, %y, %y), true_computation=%branch_a, false_computation=%branch_b
  %s = f32[8]{0} call(%k), to_apply=%callee
  %cs = ((f32[8]{0}), f32[8]{0}, u32[]) copy-start(%s)
  %cd = f32[8]{0} copy-done(%cs)
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[8]{0}, f32[8,8]{1,0}) tuple(%j, %cd, %w)
}

%cond (t: (s32[], f32[8], f32[8,8])) -> pred[] {
  %t = (s32[], f32[8]{0}, f32[8,8]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(100)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (x: f32[8], w: f32[8,8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %w = f32[8,8]{1,0} parameter(1)
  %c = f32[8]{0} copy(%x)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}, f32[8,8]{1,0}) tuple(%zero, %c, %w)
  %loop = (s32[], f32[8]{0}, f32[8,8]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"100"}}
  ROOT %out = f32[8]{0} get-tuple-element(%loop), index=1
}
"""


def test_counting_rule_on_hand_written_hlo():
    stats = module_stats(HLO, {'flops': 1e9})
    kernels = stats.per_update
    # Body: dot fusion 1 + cuBLAS call 1 + nested loop 3 x (fusion + add) + 4 conditions + conditional (1 + the
    # larger branch, 2) + the called computation's negate 1 + copy-start 1 (copy-done free) + counter add 1 = 18;
    # the main loop's condition 1: 19. Parameters, constants, tuples, get-tuple-elements and bitcasts are free.
    assert kernels.kernels == 19
    assert kernels.by_kind['gemm'] == 2 and kernels.by_kind['copy'] == 2 and kernels.by_kind['control flow'] == 1
    assert kernels.by_opcode['compare'] == 4 + 1 and kernels.by_opcode['sort'] == 1
    assert kernels.nested_loops == 1 and kernels.unknown_trip_counts == 0
    # Sources from the stack tables: the jax.random op by its op_name, the Adam op by its optax frame.
    assert kernels.by_source['sampler (rng)'] == 3 and kernels.by_source['optimizer (Adam)'] == 1
    assert stats.trip_count == 100 and stats.outside.kernels == 1 + 1  # the entry's copy, the loop's last test
    assert stats.flops == 1e9


def test_counter_on_a_jitted_scan_with_known_unfusable_ops():
    """Each iteration: two sorts (XLA never fuses a sort), their elementwise producers, the counter."""

    def body(carry, _):
        a = jnp.sort(carry * 3.0 + 1.0)
        b = jnp.sort(jnp.flip(a) - 2.0)
        return b, None

    def run(x):
        return jax.lax.scan(body, x, None, length=7)[0]

    compiled = jax.jit(run).lower(jnp.ones(64)).compile()
    stats = program_stats(compiled)
    kernels = stats.per_update
    assert stats.trip_count == 7
    assert kernels.by_opcode['sort'] == 2
    # Besides the sorts: at most the elementwise producers (2), the counter and the condition; nothing nested.
    assert 2 + 2 <= kernels.kernels <= 2 + 4 and kernels.nested_loops == 0
    module = HloModule(compiled.as_text())
    assert count_kernels(module, main_loop(module).callee('body')).by_opcode['sort'] == 2


def test_cost_analysis_counts_a_scan_body_once():
    """GFLOP per update comes from XLA's cost analysis of the whole fused program: a while loop's body counted once,
    whatever its trip count (if a new XLA multiplied by the trip count, this fails and hlo_stats must divide)."""
    w = jnp.ones((32, 32))

    def run(x, length):
        return jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=length)[0]

    flops = [program_stats(jax.jit(run, static_argnums=1).lower(jnp.ones((16, 32)), n).compile()).flops for n in (2, 9)]
    assert flops[0] == flops[1]
    np.testing.assert_allclose(flops[0], 2 * 16 * 32 * 32, rtol=0.05)
