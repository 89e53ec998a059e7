"""Incremental decoding against naive re-computation, batch invariance, cancellation, sampling."""

import pytest
import torch
import torch.nn.functional as F
from marian_fixtures import SENTENCES
from oracles import assert_cached_steps_equal_full

from model import BatchDecoder, DecodeParams, Translator, load
from model.network import layers
from model.decoding.vocabulary import vocabulary_argmax, vocabulary_topk
from model.network.kv_cache import KVCache
from model.network.layers import attention

MANY_ROWS = 8  # a decoder step of several rows


@pytest.fixture(scope="module")
def translator(checkpoint):
    return Translator.from_pretrained(checkpoint)


@pytest.mark.parametrize("many_rows", [False, True])
def test_cached_steps_equal_full_redecoding(checkpoint, many_rows):
    """Greedy decoding on the KV cache gives, at every step, the logits of a full teacher-forced pass, for one
    sentence a row and for many rows."""
    bundle = load(checkpoint)
    sources = [bundle.tokenizer.encode(s) for s in SENTENCES]
    if many_rows:
        sources = sources * -(-MANY_ROWS // len(sources))
    assert_cached_steps_equal_full(bundle.network, sources)


@pytest.mark.parametrize("mask_kind", ["bool", "additive", None])
@pytest.mark.parametrize("scale", [None, 1.0])
def test_matmul_attention_equals_sdpa(mask_kind, scale, monkeypatch):
    """One query per row over a strided cache view: attention() takes the matmul path."""
    g = torch.Generator().manual_seed(0)
    rows, heads, keys, dh = MANY_ROWS, 4, 9, 16
    q = torch.randn(rows, heads, 1, dh, generator=g)
    k, v = (torch.randn(rows, heads, keys + 5, dh, generator=g)[:, :, :keys] for _ in range(2))
    lengths = torch.randint(1, keys + 1, (rows,), generator=g)
    allowed = (torch.arange(keys)[None, :] < lengths[:, None])[:, None, None, :]  # (rows, 1, 1, keys)
    bias = torch.randn(rows, heads, 1, keys, generator=g).masked_fill(~allowed, float("-inf"))
    mask = {"bool": allowed, "additive": bias, None: None}[mask_kind]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    monkeypatch.setattr(layers.F, "scaled_dot_product_attention", None)  # the matmul path must not call it
    torch.testing.assert_close(attention(q, k, v, mask, scale), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("beams", [1, 3])
def test_alone_equals_inside_padded_batch(translator, beams):
    batch = translator.translate(SENTENCES, beam_size=beams, max_new_tokens=30, batch_size=len(SENTENCES))
    for text, in_batch in zip(SENTENCES, batch):
        alone = translator.translate([text], beam_size=beams, max_new_tokens=30, batch_size=1)[0]
        assert alone.token_ids == in_batch.token_ids
        assert alone.score == in_batch.score  # bit for bit: tests/model/test_batch_invariance.py


@pytest.mark.parametrize("static_shapes", [False, True])
def test_requests_join_and_leave_between_steps(translator, static_shapes):
    """Rows freed by finished requests are refilled; compaction keeps every request's output intact.

    Greedy (1 row) and 2-beam requests alternate, 12 rows in all through a decoder of 5, with staggered
    length limits (this tiny model rarely ends before its limit) so that requests finish at different steps:
    each request must give exactly what it gives decoded alone with its own parameters, greedy ones included.
    With static shapes, the step runs over row buckets 1, 2, 4, 5 (free rows included) and the whole cache."""
    tok, capacity = translator.bundle.tokenizer, 5
    limits = [5, 14, 8, 20, 6, 11, 25, 9]
    params = [DecodeParams(max_new_tokens=limits[i], num_beams=2 if i % 2 else 1, forced_eos_token_id=0,
                           bad_words_ids=((tok.pad_id,),)) for i in range(len(SENTENCES))]
    alone = {i: translator.translate([s], beam_size=params[i].num_beams, max_new_tokens=limits[i])[0]
             for i, s in enumerate(SENTENCES)}
    assert sum(p.num_beams for p in params) > capacity
    decoder = BatchDecoder(translator.bundle.network, capacity=capacity, max_source_len=128, max_new_tokens=25,
                           static_shapes=static_shapes)
    sources = [tok.encode(s) for s in SENTENCES]
    pending, results = list(range(len(SENTENCES))), {}
    joined_mid_flight = moved = 0
    while pending or decoder.searches:
        while pending and decoder.free_rows >= params[pending[0]].num_beams:
            i = pending.pop(0)
            joined_mid_flight += any(s.cur_len > 1 for s in decoder.searches.values())
            decoder.admit([(i, sources[i], params[i])])
        assert decoder.live_rows <= capacity
        rows_before = {key: list(s.rows) for key, s in decoder.searches.items()}
        for event in decoder.step():
            if event.results:
                results[event.key] = event.results[0]
        moved += sum(s.rows != rows_before[key] for key, s in decoder.searches.items())
        live = sorted(r for s in decoder.searches.values() for r in s.rows)
        assert live == list(range(decoder.live_rows))  # compact: live rows fill [0, n)
    assert joined_mid_flight and moved  # the scenario really refilled freed rows and compacted live ones
    assert sorted(results) == list(range(len(SENTENCES)))
    for i in range(len(SENTENCES)):
        assert results[i].token_ids == alone[i].token_ids, (i, params[i].num_beams)
        assert results[i].score == pytest.approx(alone[i].score, abs=1e-4), i
    assert decoder.live_rows == 0


@pytest.mark.parametrize("cancelled", [3, 1])  # the last row, a row in the middle (the tail moves into it)
def test_cancel_frees_rows_and_spares_the_others(translator, cancelled):
    tok = translator.bundle.tokenizer
    params = DecodeParams(max_new_tokens=20, bad_words_ids=((tok.pad_id,),), forced_eos_token_id=0)
    spared = [i for i in range(4) if i != cancelled]
    expected = translator.translate([SENTENCES[i] for i in spared], max_new_tokens=20)
    decoder = BatchDecoder(translator.bundle.network, capacity=8, max_source_len=128, max_new_tokens=20)
    decoder.admit([(i, tok.encode(s), params) for i, s in enumerate(SENTENCES[:4])])
    decoder.step()
    decoder.cancel(cancelled)
    assert decoder.live_rows == 3
    results = {}
    while decoder.searches:
        for event in decoder.step():
            if event.results:
                results[event.key] = event.results[0].token_ids
    assert [results[i] for i in spared] == [t.token_ids for t in expected]
    assert decoder.live_rows == 0 and decoder.free_rows == 8


def test_requests_cancelled_while_encoded_do_not_join(translator):
    """One encoder pass for greedy and beam requests; two are cancelled before it joins: the others take rows
    [0, 4) with their own sources and decode as they do alone."""
    tok = translator.bundle.tokenizer
    beams = [1, 2, 3, 1]
    params = [DecodeParams(max_new_tokens=12, num_beams=b, bad_words_ids=((tok.pad_id,),), forced_eos_token_id=0)
              for b in beams]
    decoder = BatchDecoder(translator.bundle.network, capacity=8, max_source_len=128, max_new_tokens=12)
    encoded = decoder.encode([(i, tok.encode(SENTENCES[i]), params[i]) for i in range(4)])
    assert encoded.rows == 7
    decoder.join(encoded, dropped=frozenset({1, 3}))
    assert {key: s.rows for key, s in decoder.searches.items()} == {0: [0], 2: [1, 2, 3]}
    results = {}
    while decoder.searches:
        for event in decoder.step():
            if event.results:
                results[event.key] = event.results[0].token_ids
    for i in (0, 2):
        alone = translator.translate([SENTENCES[i]], beam_size=beams[i], max_new_tokens=12)[0]
        assert results[i] == alone.token_ids, i
    assert sorted(results) == [0, 2] and decoder.free_rows == 8


def test_sources_written_with_copies_fill_each_beams_rows_with_their_source():
    """write_source with copies [2, 2, 1, 3]: rows [first, first + 8) hold each source's keys, values and mask once
    per copy, as repeating the sources row by row gives; rows outside are left alone."""
    layers, heads, dh, sources, source_len = 2, 3, 4, 4, 5
    cache = KVCache(layers, rows=12, num_heads=heads, head_dim=dh, max_target_len=6, max_source_len=7,
                    dtype=torch.float32, device="cpu")
    k, v = (torch.randn(layers, sources, heads, source_len, dh) for _ in range(2))
    mask = torch.rand(sources, source_len) > 0.3
    copies, first = [2, 2, 1, 3], 3
    cache.write_source(first, k, v, mask, copies)
    index = torch.repeat_interleave(torch.tensor(copies))
    rows = slice(first, first + sum(copies))
    assert torch.equal(cache.cross_k[:, rows, :, :source_len], k[:, index])
    assert torch.equal(cache.cross_v[:, rows, :, :source_len], v[:, index])
    assert torch.equal(cache.source_mask[rows, :source_len], mask[index])
    assert not cache.source_mask[rows, source_len:].any()
    untouched = [*range(first), *range(first + sum(copies), 12)]
    assert not cache.cross_k[:, untouched].any() and cache.source_mask[untouched, 0].all()


def test_admit_rejects_a_key_already_decoding(translator):
    decoder = BatchDecoder(translator.bundle.network, capacity=4, max_source_len=32, max_new_tokens=7)
    params = DecodeParams(max_new_tokens=5)
    decoder.admit([("a", [5, 0], params)])
    with pytest.raises(ValueError):
        decoder.admit([("a", [6, 0], params)])
    with pytest.raises(ValueError):
        decoder.admit([("b", [6, 0], params), ("b", [7, 0], params)])
    assert decoder.live_rows == 1


def test_sampling_is_reproducible_per_seed(translator):
    def sample(seed, **kw):
        return translator.translate(SENTENCES[:3], max_new_tokens=20, do_sample=True, seed=seed, **kw)

    assert [t.token_ids for t in sample(7)] == [t.token_ids for t in sample(7)]
    assert [t.token_ids for t in sample(7, top_k=1)] == [t.token_ids for t in translator.translate(
        SENTENCES[:3], beam_size=1, max_new_tokens=20)]


def test_a_tiny_temperature_samples_greedily(translator):
    greedy = translator.translate(SENTENCES[:3], beam_size=1, max_new_tokens=20)
    tiny = translator.translate(SENTENCES[:3], max_new_tokens=20, do_sample=True, temperature=5e-324, seed=1)
    assert [t.token_ids for t in tiny] == [t.token_ids for t in greedy]


def test_min_new_tokens_and_max_new_tokens(translator):
    for t in translator.translate(SENTENCES[:3], beam_size=1, max_new_tokens=7, min_new_tokens=5):
        assert 5 <= len(t.token_ids) <= 7
        if len(t.token_ids) == 7:
            assert t.token_ids[-1] == translator.bundle.tokenizer.eos_id  # forced </s> at the limit, as transformers
            assert t.finish_reason == "length"
    pad = translator.bundle.tokenizer.pad_id
    assert all(pad not in t.token_ids for t in translator.translate(SENTENCES, beam_size=3, max_new_tokens=20))


def test_onednn_linears_match_torch_linears_and_keep_weights(checkpoint):
    """Loading for the CPU routes float32 Linears through oneDNN: same logits, names, and tied weights."""
    from model.kernels.cpu_kernels import OneDNNLinear, use_onednn_linears

    model = load(checkpoint).network
    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    assert isinstance(model.lm_head, OneDNNLinear)
    assert model.decoder_layers[0].ffn.fc1.weight.layout == torch._mkldnn  # packed once at load
    src = torch.tensor([[5, 6, 7, model.config.eos_token_id]])
    tgt = torch.tensor([[model.config.decoder_start_token_id, 8, 9]])
    keys = list(model.state_dict())
    with torch.inference_mode():
        routed = model(src, src != model.config.pad_token_id, tgt)
        use_onednn_linears(model, enable=False)
        plain = model(src, src != model.config.pad_token_id, tgt)
    assert not any(isinstance(m, OneDNNLinear) for m in model.modules())
    assert not any(p.layout == torch._mkldnn for p in model.parameters())
    assert (routed - plain).abs().max().item() < 1e-4
    assert list(model.state_dict()) == keys
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight is model.decoder_embed.weight


def test_a_tied_output_projection_multiplies_by_a_packed_copy_unless_told_not_to(checkpoint):
    """load() gives a tied output projection a packed copy of the embeddings (pack_tied_output, the server's
    SERVER_PACK_TIED_OUTPUT); either way the weight stays tied and the logits are the same."""
    from server.settings import Settings

    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    packed, plain = (load(checkpoint, pack_tied_output=pack).network for pack in (True, False))
    assert packed.config.tie_word_embeddings
    assert packed.lm_head.weight is packed.decoder_embed.weight and plain.lm_head.weight is plain.decoder_embed.weight
    assert packed.lm_head.packed_copy is not None and plain.lm_head.packed_copy is None
    src = torch.tensor([[5, 6, 7, packed.config.eos_token_id]] * 4)
    tgt = torch.tensor([[packed.config.decoder_start_token_id, 8, 9]] * 4)
    with torch.inference_mode():
        mask = src != packed.config.pad_token_id
        assert torch.equal(packed(src, mask, tgt), plain(src, mask, tgt))  # 4 rows and more: identical
    assert Settings(dtype="float32").pack_tied_output
    assert not Settings.from_env({"SERVER_PACK_TIED_OUTPUT": "false"}).pack_tied_output
    with pytest.raises(ValueError, match="SERVER_PACK_TIED_OUTPUT: expected true or false"):
        Settings.from_env({"SERVER_PACK_TIED_OUTPUT": "sometimes"})


@pytest.mark.parametrize("pack_shared", [True, False])
def test_packed_onednn_weights_hold_the_same_matrix_and_compute_the_same_products(pack_shared):
    """A weight packed into oneDNN's layout unpacks to the same numbers and multiplies as the plain one does, at one
    row (another kernel: within float rounding) and at many; a weight two modules share stays plain and tied, and
    with pack_shared its Linear multiplies by a packed copy of it, alike."""
    from model.kernels.cpu_kernels import use_onednn_linears

    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Linear(64, 10), torch.nn.Embedding(10, 64))
    model[1].weight = model[2].weight  # tied, as an output projection and its embedding
    originals = [model[i].weight.detach().clone() for i in (0, 1)]
    keys = list(model.state_dict())
    use_onednn_linears(model, pack_shared=pack_shared)
    assert model[0].weight.layout == torch._mkldnn and model[1].weight is model[2].weight
    assert model[1].weight.layout == torch.strided and list(model.state_dict()) == keys
    assert (model[1].packed_copy is not None) == pack_shared
    if pack_shared:
        assert model[1].packed_copy.layout == torch._mkldnn
        assert torch.equal(model[1].packed_copy.to_dense(), originals[1])
    with torch.inference_mode():
        for rows in (1, 4, 33):
            x = torch.randn(rows, 64)
            for linear, original in zip(model, originals):
                assert torch.allclose(linear(x), torch.nn.functional.linear(x, original, linear.bias), atol=1e-5)
    use_onednn_linears(model, enable=False)
    assert torch.equal(model[0].weight, originals[0]) and model[1].weight is model[2].weight
    assert "packed_copy" not in model[1]._buffers


def test_one_or_two_rows_multiply_as_the_same_rows_inside_a_product_of_the_rows_the_layout_is_packed_for():
    """Products over one or two rows run padded with zero rows to PACKED_FOR_ROWS (oneDNN's kernel for fewer rows
    reads the packed weight slower): the trace of one or two rows pads them, the trace of three does not, and every
    row comes out bit for bit as inside a product over PACKED_FOR_ROWS rows, eagerly, in any leading shape, traced."""
    from model.kernels.cpu_kernels import PACKED_FOR_ROWS, use_onednn_linears

    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    torch.manual_seed(0)
    linear = use_onednn_linears(torch.nn.Sequential(torch.nn.Linear(64, 96)))[0]
    x = torch.randn(PACKED_FOR_ROWS, 64)
    with torch.inference_mode():
        full = linear(x)  # (PACKED_FOR_ROWS, 96)
        for rows, pads in ((1, True), (2, True), (3, False)):
            assert torch.equal(linear(x[:rows]), full[:rows])
            assert torch.equal(linear(x[:rows, None]), full[:rows, None])  # (rows, 1, 64): a decoder step's input
            traced = torch.jit.trace(linear, x[:rows], check_trace=False)
            assert torch.equal(traced(x[:rows]), full[:rows])
            assert ("aten::pad" in str(traced.inlined_graph)) == pads


def test_the_written_out_rms_norm_computes_torchs_numbers():
    """layers.RMSNorm (six operators in float32 on the CPU) gives nn.RMSNorm's numbers bit for bit, eagerly and
    traced, at a decoder step's and an encoder pass's shapes; other dtypes take torch's own."""
    torch.manual_seed(0)
    norm = layers.RMSNorm(512, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(512))
    reference = torch.nn.RMSNorm(512, eps=1e-6)
    reference.load_state_dict(norm.state_dict())
    traced = torch.jit.trace(norm, torch.randn(2, 1, 512))
    assert "aten::rms_norm" not in str(traced.inlined_graph)  # written out, not torch's operator
    for shape in [(1, 1, 512), (7, 1, 512), (3, 9, 512)]:
        x = torch.randn(shape) * 4
        assert torch.equal(norm(x), reference(x)) and torch.equal(traced(x), reference(x))
    x = torch.randn(2, 3, 512, dtype=torch.bfloat16)
    assert torch.equal(norm.to(torch.bfloat16)(x), reference.to(torch.bfloat16)(x))


def test_new_token_limits_follow_the_models_positions(family_checkpoints):
    """The start token takes one of the model's positions: 128 positions leave 127 new tokens, whether the limit
    comes from generation_config.json (max_length 200 here), the batch decoder or the server's model limits."""
    from server.front.registry import model_limits
    from server.settings import Settings

    bundle = load(family_checkpoints["nllb"])
    assert bundle.max_positions == 128 and bundle.generation.max_new_tokens == 127
    BatchDecoder(bundle.network, capacity=1, max_source_len=8, max_new_tokens=127)
    with pytest.raises(ValueError, match="128 positions"):
        BatchDecoder(bundle.network, capacity=1, max_source_len=8, max_new_tokens=128)
    assert model_limits(Settings(dtype="float32", max_new_tokens=500), bundle.max_positions).max_new_tokens == 127


@pytest.mark.parametrize("vocab", [3001, 4096])
@pytest.mark.parametrize("k", [2, 8])
def test_vocabulary_topk_equals_torch_topk(vocab, k):
    """Block maxima find torch.topk's values and indices: the best token in the short last block, rows with
    banned (-inf) tokens, and rows with fewer than k allowed tokens (ties among -inf, left to torch.topk)."""
    g = torch.Generator().manual_seed(vocab + k)
    scores = torch.randn(40, vocab, generator=g).log_softmax(-1)
    scores[0, vocab - 1] = 5.0  # in the last, partial block
    scores[1, :] = float("-inf")
    scores[1, [3, 700, vocab - 2]] = torch.tensor([-1.0, -0.5, -2.0])  # fewer than k allowed
    scores[2:20].masked_fill_(torch.rand(18, vocab, generator=g) < 0.5, float("-inf"))
    scores[20, :64] = 10.0 + torch.arange(64.0)  # the k best in one block
    values, indices = vocabulary_topk(scores, k)
    expected = torch.topk(scores, k)
    assert torch.equal(values, expected.values)
    assert torch.equal(indices, expected.indices)


@pytest.mark.parametrize("vocab", [3001, 4096])
def test_vocabulary_argmax_equals_torch_argmax(vocab):
    """The first maximum's index, as torch.argmax: ties within a block and across blocks, the best token in the
    short last block, rows of -inf but one token, and a row of all -inf."""
    g = torch.Generator().manual_seed(vocab)
    scores = torch.randn(12, vocab, generator=g)
    scores[0, vocab - 1] = 9.0  # in the last, partial block
    scores[1, [70, 75]] = 9.0  # tied within one block
    scores[2, [5, 3000]] = 9.0  # tied across blocks
    scores[3, :] = float("-inf")
    scores[3, 1234] = 0.0
    scores[4, :] = float("-inf")
    scores[5] = scores[5].round()  # many ties
    assert torch.equal(vocabulary_argmax(scores), scores.argmax(-1, keepdim=True))
