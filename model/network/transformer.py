"""The encoder-decoder Transformer: encode once, decode_step per token on a KV cache, forward as the oracle.

One network for every family; what differs (norm placement, positions, embedding and final norms, embedding
scale, activation) comes from config.architecture.

Dimensions: B batch rows, S source length, T target length, L layers, H heads, Dh head size, D model size,
V target vocabulary, n live decoder rows.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from .architecture import Architecture, ModelConfig, Positions
from .audio_front import AudioFront
from .kv_cache import KVCache
from .layers import DecoderLayer, EncoderLayer, attended_length, embed_scale, make_norm, optional_dropout
from .positions import RelativePositionBias, position_embeddings


def optional_norm(enabled: bool, arch: Architecture, d_model: int) -> nn.Module:
    return make_norm(arch, d_model) if enabled else nn.Identity()


# Packed sources per encoder row: attention's cost grows with the square of a row's length, the linear layers' with
# the tokens only, and 128 tokens (a few sentences) keep both near their unpadded cost.
PACKED_ROW_TOKENS = 128


def pack_rows(lengths: list[int], row_tokens: int) -> tuple[list[int], list[int]]:
    """Sources of these lengths packed in order into rows of at most `row_tokens` tokens → each source's row and
    its offset there."""
    rows, offsets, row, used = [], [], 0, 0
    for length in lengths:
        if used and used + length > row_tokens:
            row, used = row + 1, 0
        rows.append(row)
        offsets.append(used)
        used += length
    return rows, offsets


class Seq2SeqTransformer(nn.Module):
    def __init__(self, config: ModelConfig, dropout: float = 0.0):
        super().__init__()
        self.config = config
        arch, d = config.architecture, config.d_model
        self.embed_scale = embed_scale(d, arch.scale_embedding)
        self.output_scale = d ** -0.5 if arch.scale_output else 1.0
        self.encoder_embed = nn.Embedding(config.vocab_size, d)
        self.decoder_embed = (self.encoder_embed if config.shared_embeddings
                              else nn.Embedding(config.target_vocab_size, d))
        self.encoder_positions, self.decoder_positions = position_embeddings(config)
        # Whisper: features in, through convolutions (the decoder embeddings are then the only ones)
        self.audio_front = (AudioFront(config.num_mel_bins, d, config.source_positions) if config.num_mel_bins
                            else None)
        # what attention reads of a sequence of `length` keys in each stack (layers.attended_length)
        self.encoder_attends = partial(attended_length, head_dim=config.heads_dim(config.encoder_attention_heads))
        self.decoder_attends = partial(attended_length, head_dim=config.heads_dim(config.decoder_attention_heads))
        self.encoder_relative_bias = self.decoder_relative_bias = None
        if arch.positions is Positions.RELATIVE:  # buckets for as many positions as attention reads
            self.encoder_relative_bias, self.decoder_relative_bias = (
                RelativePositionBias(config.relative_buckets, config.relative_max_distance, heads, bidirectional,
                                     attends(config.max_position_embeddings))
                for heads, bidirectional, attends in ((config.encoder_attention_heads, True, self.encoder_attends),
                                                      (config.decoder_attention_heads, False, self.decoder_attends)))
        self.encoder_embed_norm = optional_norm(arch.embedding_norm, arch, d)
        self.decoder_embed_norm = optional_norm(arch.embedding_norm, arch, d)
        heads = config.encoder_attention_heads
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(d, heads, config.heads_dim(heads), config.encoder_ffn_dim, arch, dropout)
            for _ in range(config.encoder_layers))
        heads = config.decoder_attention_heads
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(d, heads, config.heads_dim(heads), config.decoder_ffn_dim, arch, dropout)
            for _ in range(config.decoder_layers))
        self.encoder_norm = optional_norm(arch.final_norms, arch, d)
        self.decoder_norm = optional_norm(arch.final_norms, arch, d)
        # The output bias is final_logits_bias (Marian, mBART, BART): fixed (not trained), zero when a checkpoint
        # has none, and added inside the output matmul rather than in a second pass over (n, V) logits.
        self.lm_head = nn.Linear(d, config.target_vocab_size)
        nn.init.zeros_(self.lm_head.bias)
        self.lm_head.bias.requires_grad_(False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.decoder_embed.weight
        self.dropout = optional_dropout(dropout)
        self.traced = None  # model.kernels.traced_step.Traced: the stacks below traced, once the weights are final

    @property
    def _stacks(self):
        """What runs encoder_stack, memory_projections and decoder_stack: the traces when set, else this network."""
        return self if self.traced is None else self.traced

    @property
    def device(self) -> torch.device:
        return self.encoder_embed.weight.device  # embeddings stay float under int8

    @property
    def dtype(self) -> torch.dtype:
        return self.encoder_embed.weight.dtype

    @property
    def cache_dtype(self) -> torch.dtype:
        """The KV cache's: the network's, but float32 for bfloat16 on the CPU, whose bfloat16 batched matmuls over
        a cache's strided views copy them first and run at about half float32's speed (one query per row attends
        in float32 there; the cache takes twice the memory)."""
        return torch.float32 if self.dtype == torch.bfloat16 and self.device.type == "cpu" else self.dtype

    def _embed(self, embedding: nn.Embedding, norm: nn.Module, ids: torch.Tensor,
               positions: torch.Tensor | None) -> torch.Tensor:
        x = embedding(ids)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        x = norm(x if positions is None else x + positions)
        return x if self.dropout is None else self.dropout(x)

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src_ids, src_mask (B, S), mask True on real tokens → encoder output (B, S, D). An audio encoder takes
        log-mel features (B, M, F) for src_ids (its mask all True: a window is never padded)."""
        if self.audio_front is not None:
            x = self.audio_front(src_ids)  # (B, S, D)
        else:
            positions = self.encoder_positions(src_ids) if self.encoder_positions is not None else None
            x = self._embed(self.encoder_embed, self.encoder_embed_norm, src_ids, positions)
        attn_mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        if self.encoder_relative_bias is not None:  # (B, H, S, S): the bias, -inf on padding
            attn_mask = self.encoder_relative_bias(src_ids.shape[1]).masked_fill(~attn_mask, float("-inf"))
        return self._stacks.encoder_stack(x, attn_mask)

    def encoder_stack(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        """The encoder layers and final norm over embedded sources x (B, S, D) → (B, S, D). Traced like
        decoder_stack (model.kernels.traced_step)."""
        for layer in self.encoder_layers:
            x = layer(x, attn_mask)
        return self.encoder_norm(x)

    def encode_windows(self, windows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-mel windows (M, F) each → encoder output (B, S, D) and its mask (B, S), all True. Each window is
        encoded alone: its 1500 positions fill the products, and its numbers never depend on the windows beside it
        (batch invariance)."""
        device = self.device
        mask = torch.ones(1, self.audio_front.positions.shape[0], dtype=torch.bool, device=device)  # (1, S)
        memory = torch.cat([self.encode(window.to(device)[None], mask) for window in windows])  # (B, S, D)
        return memory, mask.expand(len(windows), -1)

    def encode_sources(self, sources: list[list[int]] | list[torch.Tensor],
                       row_tokens: int = PACKED_ROW_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode token id lists of mixed lengths → the output laid out padded (B, S, D) and its mask (B, S),
        True on real tokens. Without padding where positions are absolute: the sources packed whole, in order, into
        rows of at most `row_tokens` tokens (a longer source alone), each token attending only to its own source
        (a block-diagonal mask), positions as the padded batch numbers them, so the linear layers work on about
        the N real tokens instead of B × longest, and attention on rows × row_tokens² pairs instead of N². Relative
        positions (T5) take the padded path, and so does a GPU: its attention kernel reads keys in blocks from the
        row's start, so a source's numbers would follow where packing placed it. An audio encoder takes log-mel
        windows (M, F) instead (encode_windows)."""
        if self.audio_front is not None:
            return self.encode_windows(sources)
        device = self.device
        lengths = [len(ids) for ids in sources]
        longest = max(lengths)
        # relative positions: padded to a length attention reads alike (layers.attended_length)
        padded = longest if self.encoder_positions is not None else self.encoder_attends(longest)
        mask = (torch.arange(padded)[None, :] < torch.tensor(lengths)[:, None]).to(device)  # (B, S')
        pad = self.config.pad_token_id
        src = torch.tensor([[*ids, *[pad] * (padded - len(ids))] for ids in sources], device=device)  # (B, S')
        if self.encoder_positions is None or device.type == "cuda":
            return self.encode(src, mask)[:, :longest], mask[:, :longest]  # (B, S, D), (B, S)
        packed_row, offset = pack_rows(lengths, row_tokens)  # (B,) each: where each source goes; a longer one alone
        segment, position = mask.nonzero(as_tuple=True)  # (N,) each: the source of each token, its index there
        row = torch.tensor(packed_row, device=device)[segment]  # (N,) the packed row of each token, its slot there
        slot = torch.tensor(offset, device=device)[segment] + position
        shape = (max(packed_row) + 1, self.encoder_attends(int(slot.max()) + 1))  # (P, L)
        tokens = torch.full(shape, pad, device=device)
        tokens[row, slot] = src[segment, position]
        owner = torch.full(shape, -1, device=device)  # the source of each slot; -1: padding, attending to itself
        owner[row, slot] = segment
        positions = self.encoder_positions(src)  # (B, S, D) or (S, D): the family's own numbering
        positions = positions[segment, position] if positions.dim() == 3 else positions[position]  # (N, D)
        placed = positions.new_zeros(*shape, positions.shape[-1])  # (P, L, D)
        placed[row, slot] = positions
        x = self._embed(self.encoder_embed, self.encoder_embed_norm, tokens, placed)  # (P, L, D)
        attn_mask = (owner[:, :, None] == owner[:, None, :])[:, None]  # (P, 1, L, L)
        x = self._stacks.encoder_stack(x, attn_mask)  # (P, L, D)
        memory = x.new_zeros(len(sources), longest, x.shape[-1])
        memory[segment, position] = x[row, slot]  # (B, S, D), zeros on padding
        return memory, mask

    def cross_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of every decoder layer, computed once per source: 2 × (L, B, H, S, Dh)."""
        return self._stacks.memory_projections(memory)

    def memory_projections(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cross_kv, eagerly."""
        kvs = [layer.encoder_attn.project_memory(memory) for layer in self.decoder_layers]
        return torch.stack([k for k, _ in kvs]), torch.stack([v for _, v in kvs])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.decoder_norm(hidden)
        return self.lm_head(hidden * self.output_scale if self.output_scale != 1.0 else hidden)  # (..., V)

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T, V) for decoder inputs tgt_ids (B, T); no cache."""
        x, *_ = self._teacher_forced(src_ids, src_mask, tgt_ids, len(self.decoder_layers))
        return self.logits(x)

    def cross_attention(self, src_ids: torch.Tensor, src_mask: torch.Tensor, tgt_ids: torch.Tensor,
                        layer: int) -> torch.Tensor:
        """Teacher-forced, as forward: the cross-attention weights (B, H, T, S) of decoder layer `layer` (0-based),
        computed naively beside SDPA (which returns none); the layers above it do not run."""
        x, self_mask, memory, cross_mask = self._teacher_forced(src_ids, src_mask, tgt_ids, layer)
        attending = self.decoder_layers[layer]
        k, _ = attending.encoder_attn.project_memory(memory)
        return attending.cross_attention_weights(x, self_mask, k, cross_mask)

    def heads_attention(self, tgt_ids: torch.Tensor, cross_k: torch.Tensor, cross_v: torch.Tensor,
                        cross_mask: torch.Tensor, heads: tuple[tuple[int, int], ...]) -> tuple[torch.Tensor, ...]:
        """Teacher-forced over decoder inputs tgt_ids (B, T) on a source's cached cross-attention keys and values
        (2 × (L, B, H, S, Dh), cross_mask (B, 1, 1, S)) → logits (B, T, V) and the float32 cross-attention weights
        (B, A, T, S) of the (layer, head) pairs `heads`, in their order: Whisper's alignment heads, after a
        window is decoded (model.decoding.token_timing). The cached step returns no weights, and stays as fast."""
        x, self_mask = self._decoder_input(tgt_ids)
        picked = {}  # (layer, head) → (B, T, S): only these kept, a layer's other heads freed as it is done
        for i, layer in enumerate(self.decoder_layers):
            x, queried = layer.teacher_forced(x, self_mask, cross_k[i], cross_v[i], cross_mask)
            if any(i == wanted for wanted, _ in heads):
                weights = layer.encoder_attn.weights(queried, cross_k[i], cross_mask)  # (B, H, T, S)
                picked |= {(i, h): weights[:, h].clone() for wanted, h in heads if wanted == i}
        return self.logits(x), torch.stack([picked[pair] for pair in heads], 1)  # (B, T, V), (B, A, T, S)

    def _teacher_forced(self, src_ids, src_mask, tgt_ids, layers: int):
        """The decoder state (B, T, D) after the first `layers` decoder layers, with what the next layer reads:
        the self-attention mask (None: causal), the encoder output (B, S, D) and the cross mask (B, 1, 1, S)."""
        memory = self.encode(src_ids, src_mask)
        cross_mask = src_mask[:, None, None, :]
        x, self_mask = self._decoder_input(tgt_ids)
        for layer in self.decoder_layers[:layers]:
            k, v = layer.encoder_attn.project_memory(memory)
            x = layer(x, self_mask, k, v, cross_mask)
        return x, self_mask, memory, cross_mask

    def _decoder_input(self, tgt_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Decoder inputs (B, T) embedded (B, T, D), and the self-attention mask of a teacher-forced pass (None:
        causal)."""
        positions = self.decoder_positions(tgt_ids) if self.decoder_positions is not None else None
        x = self._embed(self.decoder_embed, self.decoder_embed_norm, tgt_ids, positions)
        self_mask = None
        if self.decoder_relative_bias is not None:  # (1, H, T, T): the bias, -inf above the diagonal
            t = tgt_ids.shape[1]
            future = torch.ones(t, t, dtype=torch.bool, device=tgt_ids.device).triu(1)
            self_mask = self.decoder_relative_bias(t).masked_fill(future, float("-inf"))
        return x, self_mask

    def new_cache(self, rows: int, max_target_len: int, max_source_len: int) -> KVCache:
        c = self.config
        heads = c.decoder_attention_heads
        return KVCache(c.decoder_layers, rows, heads, c.heads_dim(heads), self.decoder_attends(max_target_len),
                       self.decoder_attends(max_source_len), self.cache_dtype, self.device)

    def decode_step(self, cache: KVCache, tokens: torch.Tensor, positions: torch.Tensor,
                    target_len: int, source_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder step for live rows [0, n): tokens, positions (n,) → logits (n, V) and the alignment
        layer's cross-attention input (n, D), for alignment(). positions are indices into the target sequence
        (the cache slot; the start token is 0); the family's position embedding maps them. target_len =
        max(positions) + 1 and source_len = longest live source bound what attention reads. The layers run
        traced where `traced` is set (model.kernels.traced_step), eagerly otherwise.
        """
        inputs = self.step_inputs(cache, tokens, positions, target_len, source_len)
        return self._stacks.decoder_stack(*inputs)

    @property
    def alignment_layer(self) -> int:
        """The decoder layer whose cross-attention aligns best: the penultimate one. Garg et al. (2019, "Jointly
        Learning to Align and Translate", fairseq's alignment_layer) measured the lowest alignment error there for
        models trained without alignment supervision; the last layer attends to what helps predict the next word
        more than to its source, and the lower layers attend broadly."""
        return max(len(self.decoder_layers) - 2, 0)

    def alignment(self, cache: KVCache, queried: torch.Tensor, source_rows: torch.Tensor,
                  source_len: int) -> torch.Tensor:
        """The alignment layer's cross-attention weights in the step that gave `queried` (decode_step's second
        output (n, D), here (G, R, D): R rows reading each of G sources), averaged over heads → (G, R, source_len);
        source_rows (G,): a cache row holding each source. In float64: the sums' order changes with source_len
        and the rows beside, and a row's word with the most attention (model.decoding.constrained) must not change with
        them."""
        layer = self.alignment_layer
        keys = cache.cross_k[layer].index_select(0, source_rows)[:, :, :source_len]  # (G, H, S, Dh)
        mask = cache.source_mask.index_select(0, source_rows)[:, None, None, :source_len]  # (G, 1, 1, S)
        weights = self.decoder_layers[layer].encoder_attn.weights(queried, keys, mask, torch.float64)  # (G, H, R, S)
        return weights.mean(1)

    def step_inputs(self, cache: KVCache, tokens: torch.Tensor, positions: torch.Tensor, target_len: int,
                    source_len: int) -> tuple[torch.Tensor, ...]:
        """What decoder_stack takes for a step (decode_step's arguments); attention reads the lengths rounded up
        (layers.attended_length), so that a row's numbers do not depend on the longest row beside it."""
        n = tokens.shape[0]
        target_len, source_len = self.decoder_attends(target_len), self.decoder_attends(source_len)
        step_positions = (self.decoder_positions.step(tokens, positions) if self.decoder_positions is not None
                          else None)
        x = self._embed(self.decoder_embed, self.decoder_embed_norm, tokens, step_positions)[:, None, :]  # (n, 1, D)
        self_mask = (torch.arange(target_len, device=tokens.device)[None, :] <= positions[:, None])
        self_mask = self_mask[:, None, None, :]  # (n, 1, 1, T)
        if self.decoder_relative_bias is not None:  # (n, H, 1, T): this position's bias row, -inf on the future
            self_mask = self.decoder_relative_bias.step(positions, target_len).masked_fill(~self_mask, float("-inf"))
        cross_mask = cache.source_mask[:n, None, None, :source_len]  # (n, 1, 1, S)
        return x, positions, self_mask, cross_mask, *cache.step_views(n, target_len, source_len)

    def decoder_stack(self, x: torch.Tensor, positions: torch.Tensor, self_mask: torch.Tensor,
                      cross_mask: torch.Tensor, self_k: torch.Tensor, self_v: torch.Tensor, cross_k: torch.Tensor,
                      cross_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder layers and the output projection of one step over live rows [0, n): x (n, 1, D), the
        masks, the cache's views 4 × (L, n, H, T or S, Dh) (this step's keys and values are written into the
        self-attention ones at `positions`) → logits (n, V) and the alignment layer's cross-attention input
        (n, D). No Python branch here depends on n, T or S, so a trace of it serves every shape
        (model.kernels.traced_step)."""
        rows = torch.arange(x.shape[0], device=x.device)
        queried = x
        for i, (layer, k_cache, v_cache, k_cross, v_cross) in enumerate(zip(
                self.decoder_layers, self_k.unbind(0), self_v.unbind(0), cross_k.unbind(0), cross_v.unbind(0))):
            q, k, v = layer.self_attn.project(layer.self_attention_input(x))  # (n, H, 1, Dh)
            if k.dtype != k_cache.dtype:  # bfloat16 on the CPU: a float32 cache (cache_dtype)
                k, v = k.to(k_cache.dtype), v.to(v_cache.dtype)
            k_cache[rows, :, positions] = k[:, :, 0]  # this step's key and value at each row's position
            v_cache[rows, :, positions] = v[:, :, 0]
            attn = layer.self_attn.attend(q, k_cache, v_cache, self_mask)
            x, layer_queried = layer.post_self_attention(x, attn, k_cross, v_cross, cross_mask)
            if i == self.alignment_layer:
                queried = layer_queried
        return self.logits(x[:, 0]), queried[:, 0]
