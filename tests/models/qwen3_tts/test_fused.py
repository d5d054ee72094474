"""The fused frame path (models/qwen3_tts/fused.py) equals the reference path on a tiny random checkpoint.

In float32 on the CPU: the released parameters stay as loaded, the folded projections derive from them; prefill and decode
hidden states and every code-predictor step's logits agree with the reference modules; greedy generation
through `EngineCore` gives the reference implementation's codes token for token, with the torch kernels and
with the Triton kernels (run by Triton's interpreter); sampled generation stays within the vocabulary."""

from __future__ import annotations

import torch

from test_talker_parity import TEXTS, engine_greedy, reference_greedy
from tiny_talker import cached_checkpoint, load_program
from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.attention import KVCache, SeqSlice, TorchAttention
from voxrt.engine.runtime.core import EngineCore
from voxrt.engine.runtime.sampling import SamplingTensors

CPU = torch.device("cpu")


def fused_program(impl: str = "torch", gemm_impl: str | None = None):
    program = load_program(cached_checkpoint(seed=0).directory)
    assert program.use_frame_path("fused", CPU, impl=impl, gemm_impl=gemm_impl) == "fused"
    return program


def test_the_released_weights_stay_and_the_folded_ones_derive_from_them(ckpt):
    _, model, _, _ = ckpt
    program = fused_program()
    ours = {f"talker.{k}": v for k, v in program.talker.state_dict().items()}
    theirs = model.state_dict()
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    layer, fused = program.talker.model.layers[0], program.fused.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    w = layer.input_layernorm.weight
    torch.testing.assert_close(fused.qkv, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]) * w)
    w2 = layer.post_attention_layernorm.weight
    torch.testing.assert_close(fused.gate_up, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]) * w2)
    assert fused.o_proj is attn.o_proj.weight and fused.down is mlp.down_proj.weight  # no copies
    assert program.fused.num_extra_bytes > 0


def test_auto_and_reference_paths_on_the_cpu():
    program = load_program(cached_checkpoint(seed=0).directory)
    assert program.use_frame_path("auto", CPU) == "reference" and program.fused is None
    assert program.use_frame_path("fused", CPU) == "fused" and program.fused.impl == "torch"
    assert program.use_frame_path("reference", CPU) == "reference" and program.fused is None


def _lm_hidden(program, requests_tokens):
    """Prefill of two sequences, then one decode step each, through paged attention: hidden states."""
    geom = program.lm_geometry
    kv = KVCache(geom.num_layers, 16, 4, geom.num_kv_heads, geom.head_dim, CPU, torch.float32)
    pages = [[3, 7, 1], [5, 2, 9]]
    lengths = [len(t) for t in requests_tokens]
    attn = TorchAttention(kv, 2, sum(lengths), None, CPU)
    attn.fill([SeqSlice(p, n, n) for p, n in zip(pages, lengths)])
    ids = torch.tensor([t for tokens in requests_tokens for t in tokens])
    x = program.embed_prompt(ids, torch.full_like(ids, -1))
    prefill = program.lm_forward(x, attn.positions[: x.shape[0]], attn)
    attn = TorchAttention(kv, 2, 2, None, CPU)
    attn.fill([SeqSlice(p, 1, n + 1) for p, n in zip(pages, lengths)])
    codes = torch.randint(0, 64, (2, program.num_codebooks), generator=torch.Generator().manual_seed(1))
    x = program.embed_step(torch.tensor([5, 9]), codes)
    decode = program.lm_forward(x, attn.positions[:2], attn)
    return prefill, decode


def test_lm_and_depth_steps_equal_the_reference_path():
    reference = load_program(cached_checkpoint(seed=0).directory)
    fused = fused_program()
    tokens = [[11, 12, 13, 14, 15], [21, 22, 23]]
    with torch.inference_mode():
        for ours, theirs in zip(_lm_hidden(fused, tokens), _lm_hidden(reference, tokens)):
            torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
        hidden = torch.randn(3, reference.cfg.talker.lm.hidden_size, generator=torch.Generator().manual_seed(2))
        code0 = torch.tensor([3, 17, 40])
        sampling = SamplingTensors.empty(3, CPU)  # greedy rows
        logits_ref, logits_fused = [], []
        cp = reference.talker.code_predictor
        codes_ref = cp.generate(hidden, reference.talker.model.codec_embedding(code0), code0, sampling, logits_ref)
        codes_fused = fused.fused.generate_depth(hidden, code0, sampling, logits_fused)
    assert torch.equal(codes_fused, codes_ref)
    assert len(logits_fused) == len(logits_ref) == reference.num_codebooks - 1
    for ours, theirs in zip(logits_fused, logits_ref):
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_greedy_generation_on_the_fused_path_equals_the_reference(ckpt):
    _, model, tokenizer, _ = ckpt
    jobs = {"a": ("vivian", TEXTS["vivian"]), "b": ("eric", TEXTS["eric"])}
    requests, _ = engine_greedy(fused_program("torch"), jobs, max_frames=10, frame_path="fused")
    for rid, (voice, text) in jobs.items():
        assert [list(f) for f in requests[rid].frames] == reference_greedy(model, tokenizer, voice, text, 11), rid


def test_greedy_generation_with_the_triton_kernels_equals_the_reference(ckpt):
    """The Triton kernels themselves (Triton's interpreter on the CPU; compiled on a GPU by
    bench/gpu_fused_check.py) through the whole engine; the projections in torch here (the interpreter would
    take minutes over them: test_kernels.py checks the skinny product kernel on its own)."""
    _, model, tokenizer, _ = ckpt
    jobs = {"a": ("vivian", TEXTS["vivian"])}
    requests, _ = engine_greedy(fused_program("triton", gemm_impl="torch"), jobs, max_frames=4, frame_path="fused")
    assert [list(f) for f in requests["a"].frames] == reference_greedy(model, tokenizer, "vivian", TEXTS["vivian"], 5)


def test_sampled_generation_on_the_fused_path():
    program = fused_program()
    core = EngineCore(EngineConfig(model="qwen3-tts", device="cpu", dtype="float32", max_batch_size=4,
                                   max_seq_len=128, page_size=4, num_pages=64, frame_path="fused"), program=program)
    assert core.info.frame_path == "fused"
    params = SamplingParams(temperature=0.9, top_k=20, top_p=0.9, num_frames=6)
    requests = [core.submit(SubmitRequest(f"r{i}", "vivian", params, TEXTS["vivian"], True)) for i in range(3)]
    while core.has_work():
        core.step()
    vocab = program.cfg.talker.vocab_size
    for request in requests:
        assert request.num_frames == 6
        assert all(0 <= f[0] < vocab - 1024 and all(0 <= c < 64 for c in f[1:]) for f in request.frames)
    assert len({tuple(map(tuple, r.frames)) for r in requests}) == 3  # sampling differs per request
    core.scheduler.check_integrity()


def test_the_split_k_tensor_core_products_equal_the_reference_path_above_four_rows(monkeypatch):
    """VOXRT_SKINNY's products (kernels/gemv.py: the tensor-core product, narrow outputs split over K, the gated MLP
    around silu_mul) in the fused program itself, in Triton's interpreter: an 8-token prefill and a 6-row code
    predictor against the reference path (the GPU's check: bench/gpu_fused_check.py --skinny on --tf-rows 16).
    The tiny model's K (48-512) is mostly below the plan's 256 columns a split, so the floor is lowered to 32:
    the o_proj products (K 512) split 4 ways in every layer and step; the others keep one whole K step."""
    from voxrt.engine.runtime import kernels  # noqa: PLC0415
    from voxrt.engine.runtime.kernels import gemv  # noqa: PLC0415

    reference = load_program(cached_checkpoint(seed=0).directory)
    fused = fused_program("triton", gemm_impl="triton")
    launches = []
    real = gemv._skinny_kernel

    class Spy:
        def __getitem__(self, grid):
            def run(*args, **kw):
                launches.append((args[3], kw.get("SPLIT_K", 1)))  # (rows, splits)
                return real[grid](*args, **kw)
            return run
    monkeypatch.setattr(gemv, "_skinny_kernel", Spy())
    monkeypatch.setattr(gemv, "SPLIT_K_MIN_COLUMNS", 32)
    kernels.set_skinny(True)
    try:
        with torch.inference_mode():
            tokens = [[11, 12, 13, 14, 15], [21, 22, 23]]  # 8 prefill rows; the decode step's 2 take the gemv kernel
            ours, theirs = _lm_hidden(fused, tokens)[0], _lm_hidden(reference, tokens)[0]
            torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
            rows = 6
            hidden = torch.randn(rows, reference.cfg.talker.lm.hidden_size, generator=torch.Generator().manual_seed(5))
            code0 = torch.tensor([3, 17, 40, 1, 9, 60])
            sampling = SamplingTensors.empty(rows, CPU)
            logits_ref, logits_fused = [], []
            cp = reference.talker.code_predictor
            codes_ref = cp.generate(hidden, reference.talker.model.codec_embedding(code0), code0, sampling, logits_ref)
            codes_fused = fused.fused.generate_depth(hidden, code0, sampling, logits_fused)
    finally:
        kernels.set_skinny(None)
    # the prefill's 8 rows, the predictor's first step (2 tokens a row) and its later steps; o_proj split in the
    # talker's 2 layers and the predictor's 2 layers x 15 steps
    assert {8, 2 * rows, rows} <= {m for m, _ in launches}
    assert sum(s == 4 for _, s in launches) >= 2 + 2 * 15, launches
    assert torch.equal(codes_fused, codes_ref)
    for a, b in zip(logits_fused, logits_ref):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_the_predictor_qkv_table_equals_the_product(monkeypatch):
    """VOXRT_PREDICTOR_QKV_TABLE=on (the default): layer 0's q/k/v of predictor steps 1-14 gathered by the sampler
    from a table built at load (each code's input row through layer 0's packed projection) instead of a product a step. The
    same greedy codes and logits as the reference modules, with the torch kernels and with the Triton ones
    (the sampler's second gather, in Triton's interpreter); the table is counted in the fused path's memory."""
    from voxrt.models.qwen3_tts import fused as fused_module  # noqa: PLC0415

    reference = load_program(cached_checkpoint(seed=0).directory)
    monkeypatch.delenv("VOXRT_PREDICTOR_QKV_TABLE", raising=False)  # the default: on
    programs = {impl: fused_program(impl, gemm_impl="torch") for impl in ("torch", "triton")}
    monkeypatch.setenv("VOXRT_PREDICTOR_QKV_TABLE", "off")
    plain = fused_program("torch")
    assert plain.fused.step_qkv_tables is None
    rows = 6
    hidden = torch.randn(rows, reference.cfg.talker.lm.hidden_size, generator=torch.Generator().manual_seed(7))
    code0 = torch.tensor([3, 17, 40, 1, 9, 60])
    sampling = SamplingTensors.empty(rows, CPU)  # greedy rows
    with torch.inference_mode():
        logits_ref = []
        cp = reference.talker.code_predictor
        codes_ref = cp.generate(hidden, reference.talker.model.codec_embedding(code0), code0, sampling, logits_ref)
        for impl, program in programs.items():
            fused = program.fused
            table = fused.step_qkv_tables
            k = fused.num_code_groups
            assert table is not None and table.shape == (k - 2, fused.step_tables.shape[1], fused.pred_layers[0].qkv.shape[0])
            assert fused.num_extra_bytes == plain.fused.num_extra_bytes + table.numel() * table.element_size()
            logits, layer0 = [], []
            real = fused_module.linear
            monkeypatch.setattr(fused_module, "linear", lambda x, w, *a, **kw: (
                layer0.append(x.shape[0]) if w is fused.pred_layers[0].qkv else None, real(x, w, *a, **kw))[1])
            codes = fused.generate_depth(hidden, code0, sampling, logits)
            monkeypatch.setattr(fused_module, "linear", real)
            assert layer0 == [2 * rows], layer0  # the product at step 0 (two tokens a row) only: 14 looked up
            assert torch.equal(codes, codes_ref), impl
            for ours, theirs in zip(logits, logits_ref):
                torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_code0_in_the_sampler_equals_the_program_rule(monkeypatch, ckpt):
    """VOXRT_GLUE_KERNELS (on by default): `sample_first_code`'s processors (repetition penalty, EOS barred before
    frame 2 and for pinned rows, frame 1's code tagged) inside the sampler kernel, and the code predictor's first
    inputs (code 0 untagged) in one kernel. On the same random draws the program gives the codes it gives with the knob off,
    with the torch kernels and the Triton ones (interpreter), at frames 0, 1 and later, sampled and greedy; and
    greedy generation through the engine with the Triton kernels still equals the reference's codes."""
    _, model, tokenizer, _ = ckpt
    monkeypatch.setenv("VOXRT_GLUE_KERNELS", "off")
    plain = fused_program("torch")
    assert not plain.fused.glue_kernels
    monkeypatch.delenv("VOXRT_GLUE_KERNELS")
    programs = {impl: fused_program(impl, gemm_impl="torch") for impl in ("torch", "triton")}
    vocab = plain.cfg.talker.vocab_size
    g = torch.Generator().manual_seed(5)
    rows = 6
    hidden = torch.randn(rows, plain.cfg.talker.lm.hidden_size, generator=g)
    history = torch.zeros(rows, 2 * vocab, dtype=torch.bool)
    history[2:, torch.randint(0, vocab - 1024, (30,), generator=g)] = True
    history[4:, vocab + 3] = True  # rows 4-5 past frame 1; rows 2-3 at frame 1; rows 0-1 at frame 0
    for greedy in (False, True):
        params = [SamplingParams(temperature=0.9, top_k=50, repetition_penalty=1.05, greedy=greedy,
                                 num_frames=None if i % 2 else 8) for i in range(rows)]
        sampling = SamplingTensors.from_params(params, CPU)
        with torch.inference_mode():
            torch.manual_seed(3)
            want = plain.sample_first_code(hidden, sampling, history)
            assert (want[2:4] >= vocab).all() and (want[:2] < vocab).all() and (want[4:] < vocab).all()
            for impl, program in programs.items():
                assert program.fused.glue_kernels
                torch.manual_seed(3)
                assert torch.equal(program.sample_first_code(hidden, sampling, history), want), (impl, greedy)
            # the code predictor from the tagged codes: the first inputs' kernel untags them as the program does
            torch.manual_seed(4)
            frames = plain.generate_depth(hidden, want, sampling)
            assert torch.equal(frames[:, 0], want % vocab)
            for impl, program in programs.items():
                torch.manual_seed(4)
                assert torch.equal(program.generate_depth(hidden, want, sampling), frames), (impl, greedy)
    jobs = {"a": ("vivian", TEXTS["vivian"])}
    requests, _ = engine_greedy(programs["triton"], jobs, max_frames=4, frame_path="fused")
    assert [list(f) for f in requests["a"].frames] == reference_greedy(model, tokenizer, "vivian", TEXTS["vivian"], 5)


def test_the_sampler_gathers_a_second_row():
    """kernels/sampling.py's next2_table (the predictor's layer-0 q/k/v row beside its input row): the Triton
    kernel in the interpreter writes the chosen code's rows of both tables, as the torch rule does."""
    from voxrt.engine.runtime.kernels.sampling import sample_codes  # noqa: PLC0415

    g = torch.Generator().manual_seed(4)
    rows, vocab = 5, 64
    logits = torch.randn(rows, vocab, generator=g)
    uniform = torch.rand(rows, vocab, generator=g)
    temperature, top_p = torch.full((rows,), 0.8), torch.full((rows,), 0.9)
    top_k, greedy = torch.full((rows,), 10, dtype=torch.int64), torch.tensor([True, False, True, False, False])
    table, table2 = torch.randn(vocab, 24, generator=g), torch.randn(vocab, 1500, generator=g)  # 1500: two rounds
    outs = {}
    for impl in ("torch", "triton"):
        codes = torch.empty(rows, dtype=torch.int64)
        nxt, nxt2 = torch.empty(rows, 24), torch.empty(rows, 1500)
        sample_codes(logits, uniform, temperature, top_k, top_p, greedy, codes, next_table=table, next_out=nxt,
                     impl=impl, next2_table=table2, next2_out=nxt2)
        outs[impl] = (codes, nxt, nxt2)
    assert torch.equal(outs["torch"][0], outs["triton"][0])
    codes = outs["triton"][0]
    assert torch.equal(outs["triton"][1], table[codes]) and torch.equal(outs["triton"][2], table2[codes])
    assert torch.equal(outs["torch"][2], table2[codes])
