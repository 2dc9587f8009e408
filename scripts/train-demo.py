#!/usr/bin/python3
"""Train the embedded demo model (issue 9): a SentencePiece BPE tokenizer and a
small DeepSeek-V2-architecture model (MLA with q_lora_rank null, YaRN rope,
MoE with shared + routed experts, one dense first layer) on Jane Austen's six
novels as Debian ships them (r-cran-janeaustenr), then export a Hugging Face
checkpoint (bf16) and an AutoAWQ GEMM INT4 copy.

  scripts/train-demo.py [--out testdata/demo] [--work DIR] [--steps N]
                        [--stage all|data|train|export|mtp]

The model is scripts/ref/forward.py's CausalLM: training and the reference
forward pass are the same code, so the checkpoint means what the reference
(and a real DeepSeek-V2 checkpoint) means. Fixed seeds; CPU only.
Stages: data (text + tokenizer + ids), train (work/train.pt, loss.csv),
export (checkpoints, AWQ copy, perplexities, sample, loss PNG); mtp (a
DeepSeek-V3 multi-token-prediction module trained beside the frozen main
model and added to the shipped checkpoints, main weights untouched).
"""

import argparse
import csv
import json
import math
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "ref"))
import forward as ref  # noqa: E402

BOOKS = ["sensesensibility", "prideprejudice", "mansfieldpark", "emma",
         "northangerabbey", "persuasion"]
HELDOUT_FRAC = 0.03          # last 3% of the paragraphs of every novel
SEED = 1811                  # Sense and Sensibility
CTX = 256                    # training window; = original_max_position_embeddings
VOCAB = 4096
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"

CONFIG = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "aux_loss_alpha": 0.01,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 256,
    "initializer_range": 0.02,
    "intermediate_size": 768,
    "kv_lora_rank": 128,
    "max_position_embeddings": 4 * CTX,
    "model_type": "deepseek_v2",
    "moe_intermediate_size": 192,
    "moe_layer_freq": 1,
    "n_group": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "norm_topk_prob": False,
    "num_attention_heads": 4,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 4,
    "num_key_value_heads": 4,
    "pretraining_tp": 1,
    "q_lora_rank": None,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 4.0,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
        "original_max_position_embeddings": CTX,
        "type": "yarn",
    },
    "rope_theta": 10000.0,
    "routed_scaling_factor": 1.0,
    "scoring_func": "softmax",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 1,
    "topk_method": "greedy",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.39.3",
    "use_cache": True,
    "v_head_dim": 32,
    "vocab_size": VOCAB,
}

# DeepSeek-V2-Chat's template structure (docs/deepseek.md §8), written afresh.
CHAT_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}"
    "{% elif message['role'] == 'system' %}{{ message['content'] + '\n\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def log(*a):
    print("train-demo:", *a, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------
# data

def austen_texts(work):
    """Dump the six novels (character vectors of lines in the R package) to text."""
    os.makedirs(work, exist_ok=True)
    paths = [os.path.join(work, b + ".txt") for b in BOOKS]
    if not all(os.path.exists(p) for p in paths):
        books = ",".join('"%s"' % b for b in BOOKS)
        prog = ('suppressMessages(library(janeaustenr)); for (b in c(%s)) { e <- new.env(); '
                'data(list=b, package="janeaustenr", envir=e); '
                'writeLines(e[[b]], file.path("%s", paste0(b, ".txt")), useBytes=TRUE) }' % (books, work))
        try:
            subprocess.run(["Rscript", "-e", prog], check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit("train-demo: cannot read r-cran-janeaustenr (%s); run scripts/deps.sh --ref" % e)
    out = {}
    for b, p in zip(BOOKS, paths):
        with open(p, encoding="utf-8") as f:
            out[b] = f.read()
    return out


def paragraphs(text):
    """Re-flow the hard-wrapped lines into one line per paragraph; drop the
    _italic_ markers; keep headings (CHAPTER I) as their own paragraphs."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        p = " ".join(block.split()).replace("_", "")
        if p:
            out.append(p)
    return out


def dialogue_pairs(paras):
    """Consecutive quoted speeches: (speech, reply) with the narration kept, to
    teach the model the DeepSeek-V2 chat format ('User: ..\\n\\nAssistant: ..<eos>')."""
    pairs = []
    for a, b in zip(paras, paras[1:]):
        if a.startswith('"') and b.startswith('"') and len(a) < 400 and len(b) < 400:
            pairs.append((a, b))
    return pairs


def train_tokenizer(work, train_paras):
    import sentencepiece as spm
    prefix = os.path.join(work, "tokenizer")
    if not os.path.exists(prefix + ".model"):
        corpus = os.path.join(work, "sp-train.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            for p in train_paras:
                f.write(p + "\n")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=VOCAB,
            character_coverage=1.0, byte_fallback=True, split_digits=True,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            user_defined_symbols=["\n"], max_sentence_length=20000,
            bos_id=0, eos_id=1, unk_id=2, pad_id=-1, bos_piece=BOS, eos_piece=EOS,
            num_threads=2, seed_sentencepiece_size=200000, minloglevel=2,
            train_extremely_large_corpus=False)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def prepare_data(work):
    texts = austen_texts(work)
    train_docs, held, chats = [], [], []
    for b in BOOKS:
        ps = paragraphs(texts[b])
        cut = int(len(ps) * (1 - HELDOUT_FRAC))
        tr, ho = ps[:cut], ps[cut:]
        for i in range(0, len(tr), 24):          # documents of 24 paragraphs
            train_docs.append("\n".join(tr[i:i + 24]))
        chats += dialogue_pairs(tr)
        held.append("\n".join(ho))
    sp = train_tokenizer(work, [p for d in train_docs for p in d.split("\n")])
    bos, eos = sp.bos_id(), sp.eos_id()
    docs = [sp.encode(d) for d in train_docs]
    docs += [sp.encode("User: %s\n\nAssistant: %s" % (u, a)) + [eos] for u, a in chats]
    rng = random.Random(SEED)
    rng.shuffle(docs)
    stream = []
    for d in docs:
        stream += [bos] + d
    heldout = []
    for h in held:
        heldout += [bos] + sp.encode(h)
    np.save(os.path.join(work, "train.npy"), np.array(stream, np.int32))
    np.save(os.path.join(work, "heldout.npy"), np.array(heldout, np.int32))
    log("data: %d train tokens (%d chat pairs), %d held-out tokens, %.2f chars/token"
        % (len(stream), len(chats), len(heldout),
           sum(len(d) for d in train_docs) / max(1, sum(len(d) for d in docs))))
    return sp


# ----------------------------------------------------------------------------
# training

def init_weights(model, cfg):
    g = torch.Generator().manual_seed(SEED)
    std = cfg["initializer_range"]
    nl = cfg["num_hidden_layers"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
            elif name.endswith("e_score_correction_bias"):
                p.zero_()
            else:
                s = std
                if name.endswith(("o_proj.weight", "down_proj.weight")):
                    s = std / math.sqrt(2 * nl)   # residual-branch outputs (GPT-2 style)
                p.copy_(torch.randn(p.shape, generator=g) * s)


def aux_loss(model, alpha):
    """DeepSeek's sequence-wise expert balance loss (seq_aux), per MoE layer."""
    tot = 0.0
    for m in model.modules():
        if isinstance(m, ref.MoE) and m.last is not None:
            idx, s = m.last
            E, k = s.shape[-1], idx.shape[-1]
            B = model._batch
            s = s.view(B, -1, E)
            ce = torch.zeros(B, E).scatter_add_(1, idx.view(B, -1),
                                                torch.ones(B, idx.view(B, -1).shape[1]))
            ce = ce / (s.shape[1] * k / E)
            tot = tot + (ce * s.mean(1)).sum(1).mean() * alpha
    return tot


def train(work, steps, batch, lr_max, stop_after=None, log_every=10):
    """AdamW over `steps` (the lr schedule's length); stop_after ends the run
    early on that schedule."""
    torch.manual_seed(SEED)
    # one thread: the 2 cores are shared, and two OpenMP threads on a busy
    # machine ran slower than one in trials
    torch.set_num_threads(1)
    data = torch.from_numpy(np.load(os.path.join(work, "train.npy")).astype(np.int64))
    cfg = dict(CONFIG)
    model = ref.CausalLM(cfg)
    init_weights(model, cfg)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() >= 2]
    nodecay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr_max, betas=(0.9, 0.95), eps=1e-8)
    warm = max(1, steps // 25)
    g = torch.Generator().manual_seed(SEED + 1)
    rows, t0 = [], time.time()
    last = min(steps, stop_after or steps)
    for step in range(1, last + 1):
        lr = lr_max * (step / warm if step <= warm else
                       0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / (steps - warm))))
        for grp in opt.param_groups:
            grp["lr"] = lr
        off = torch.randint(0, len(data) - CTX - 1, (batch,), generator=g)
        x = torch.stack([data[o:o + CTX] for o in off])
        y = torch.stack([data[o + 1:o + CTX + 1] for o in off])
        model._batch = batch
        # bf16 autocast (fp32 master weights, fp32 loss): 2.7x faster than fp32
        # on this CPU (AVX512-BF16 through oneDNN)
        with torch.cpu.amp.autocast(dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        la = aux_loss(model, cfg["aux_loss_alpha"])
        opt.zero_grad(set_to_none=True)
        (loss + la).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        rows.append((step, step * batch * CTX, float(loss), float(la), lr, time.time() - t0))
        if step % log_every == 0 or step == last:
            log("step %d/%d loss %.4f aux %.4f lr %.2e %.0fs"
                % (step, steps, rows[-1][2], rows[-1][3], lr, rows[-1][5]))
    with open(os.path.join(work, "loss.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "tokens", "loss", "aux_loss", "lr", "seconds"])
        w.writerows(rows)
    torch.save(model.state_dict(), os.path.join(work, "train.pt"))
    log("trained %d steps (%d tokens) in %.0f s" % (last, last * batch * CTX, time.time() - t0))


# ----------------------------------------------------------------------------
# export: HF checkpoint (bf16), AWQ GEMM INT4 copy

def bf16_bytes(t):
    """float tensor -> little-endian BF16 bytes (round to nearest even, as torch does)."""
    return t.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors):
    """tensors: {name: (dtype string, bytes, shape)}; sorted by name, 8-aligned header."""
    hdr, off = {}, 0
    names = sorted(tensors)
    for k in names:
        dt, b, shape = tensors[k]
        hdr[k] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    hdr["__metadata__"] = {"format": "pt"}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for k in names:
            f.write(tensors[k][1])
    os.replace(tmp, path)


def quant_targets(model):
    """Names of the Linear modules AutoAWQ quantizes in a DeepSeek-V2 decoder layer."""
    out = []
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and n.startswith("model.layers."):
            out.append(n)
    return out


def awq_rtn(w, g):
    """AutoAWQ zero-point quantizer over groups of g inputs of each output row.
    w [N, K] -> q [N, K] ints 0..15, zeros [N, K/g] ints, scales [N, K/g] fp16."""
    N, K = w.shape
    wg = w.reshape(N, K // g, g).double()
    mx, mn = wg.amax(-1), wg.amin(-1)
    s = ((mx - mn).clamp(min=1e-5) / 15).half()
    s64 = s.double()
    z = (-torch.round(mn / s64)).clamp(0, 15)
    q = (torch.round(wg / s64[..., None]) + z[..., None]).clamp(0, 15)
    return q.reshape(N, K).long(), z.long(), s


def awq_fake(w, g):
    q, z, s = awq_rtn(w, g)
    N, K = w.shape
    return ((q.reshape(N, K // g, g) - z[..., None]).double() * s.double()[..., None]).reshape(N, K)


def pack_awq_gemm(q, z, s):
    """q [N, K], z [N, G], s [N, G] -> qweight I32 [K, N/8], qzeros I32 [G, N/8], scales F16 [G, N]
    (AutoAWQ GEMM: nibble slot i of word c holds column 8c + [0,2,4,6,1,3,5,7][i])."""
    order = [0, 2, 4, 6, 1, 3, 5, 7]

    def pk(a):                                       # a [rows, N] -> [rows, N/8]
        a = a.numpy().astype(np.uint32).reshape(a.shape[0], -1, 8)
        w = np.zeros(a.shape[:2], np.uint32)
        for i in range(8):
            w |= a[:, :, order[i]] << np.uint32(4 * i)
        return w.view(np.int32)
    return pk(q.t()), pk(z.t()), s.t().contiguous().numpy().astype("<f2")


class _Capture:
    """Forward hooks that collect the inputs of the given Linear modules."""

    def __init__(self, model, names):
        self.x = {n: [] for n in names}
        mods = dict(model.named_modules())
        self.h = [mods[n].register_forward_hook(self._hook(n)) for n in names]

    def _hook(self, n):
        def f(mod, inp, out):
            self.x[n].append(inp[0].detach().reshape(-1, inp[0].shape[-1]).double())
        return f

    def get(self, n):
        return torch.cat(self.x[n]) if self.x[n] else None

    def close(self):
        for h in self.h:
            h.remove()


def awq_search(X, Ws, g, n_grid=20):
    """Activation-aware scale search (AWQ): s = mean|x|^a normalised, a on a
    grid over [0, 1); keep the a whose fake-quantized W*s (then / s) gives the
    least output error on the calibration inputs X. Returns s [K]."""
    xm = X.abs().mean(0)
    ref_out = [X @ W.t() for W in Ws]
    best, best_s = None, torch.ones_like(xm)
    for i in range(n_grid):
        a = i / n_grid
        sc = xm.pow(a).clamp(min=1e-4)
        sc = sc / (sc.max() * sc.min()).sqrt()
        err = sum(((X @ (awq_fake(W * sc, g) / sc).t()) - o).pow(2).mean().item()
                  for W, o in zip(Ws, ref_out))
        if best is None or err < best:
            best, best_s = err, sc
    return best_s


def awq_quantize(model, calib, g):
    """Fold AWQ scales into a copy of the float model (exact in real arithmetic),
    then quantize every decoder-layer Linear. Returns (model, {prefix: packed})."""
    import copy
    m = copy.deepcopy(model).double()
    names = quant_targets(m)
    cap = _Capture(m, names)
    with torch.no_grad():
        for w in calib:
            m(w[None])
    cap.close()
    mods = dict(m.named_modules())
    with torch.no_grad():
        for L, layer in enumerate(m.model.layers):
            pre = "model.layers.%d." % L
            at = layer.self_attn
            # (1) input_layernorm -> q_proj, kv_a_proj_with_mqa
            X = cap.get(pre + "self_attn.q_proj")
            s = awq_search(X, [at.q_proj.weight, at.kv_a_proj_with_mqa.weight], g)
            layer.input_layernorm.weight.div_(s)
            at.q_proj.weight.mul_(s)
            at.kv_a_proj_with_mqa.weight.mul_(s)
            # (2) kv_a_layernorm -> kv_b_proj
            s = awq_search(cap.get(pre + "self_attn.kv_b_proj"), [at.kv_b_proj.weight], g)
            at.kv_a_layernorm.weight.div_(s)
            at.kv_b_proj.weight.mul_(s)
            # (3) V rows of kv_b_proj -> o_proj (attention averages V linearly)
            s = awq_search(cap.get(pre + "self_attn.o_proj"), [at.o_proj.weight], g)
            W = at.kv_b_proj.weight.view(at.nh, at.dn + at.dv, at.r)
            W[:, at.dn:, :].div_(s.view(at.nh, at.dv, 1))
            at.o_proj.weight.mul_(s)
            # (4) post_attention_layernorm -> gate/up of every expert (+ router, kept float)
            mlp = layer.mlp
            if isinstance(mlp, ref.MoE):
                X = cap.get(pre + "mlp.shared_experts.gate_proj")
                mlps = list(mlp.experts) + [mlp.shared_experts]
                Ws = [w for e in mlps for w in (e.gate_proj.weight, e.up_proj.weight)]
                s = awq_search(X, Ws, g)
                mlp.gate.weight.mul_(s)
                ex = [(pre + "mlp.experts.%d." % j, e) for j, e in enumerate(mlp.experts)]
                ex.append((pre + "mlp.shared_experts.", mlp.shared_experts))
            else:
                X = cap.get(pre + "mlp.gate_proj")
                Ws = [mlp.gate_proj.weight, mlp.up_proj.weight]
                s = awq_search(X, Ws, g)
                ex = [(pre + "mlp.", mlp)]
                mlps = [mlp]
            layer.post_attention_layernorm.weight.div_(s)
            for e in mlps:
                e.gate_proj.weight.mul_(s)
                e.up_proj.weight.mul_(s)
            # (5) up_proj rows -> down_proj, per expert
            for p, e in ex:
                X = cap.get(p + "down_proj")
                if X is None:                    # expert never routed in calibration
                    continue
                s = awq_search(X * 1.0, [e.down_proj.weight], g)
                e.up_proj.weight.div_(s[:, None])
                e.down_proj.weight.mul_(s)
    packed = {}
    for n in names:
        q, z, s = awq_rtn(mods[n].weight, g)
        packed[n] = pack_awq_gemm(q, z, s)
    return m, packed


def write_tokenizer_files(work, d, cfg):
    import shutil
    shutil.copy(os.path.join(work, "tokenizer.model"), os.path.join(d, "tokenizer.model"))
    tok = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": {"__type": "AddedToken", "content": BOS, "lstrip": False,
                      "normalized": True, "rstrip": False, "single_word": False},
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": {"__type": "AddedToken", "content": EOS, "lstrip": False,
                      "normalized": True, "rstrip": False, "single_word": False},
        "legacy": True,
        "model_max_length": cfg["max_position_embeddings"],
        "pad_token": None,
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": {"__type": "AddedToken", "content": "<unk>", "lstrip": False,
                      "normalized": True, "rstrip": False, "single_word": False},
        "use_default_system_prompt": False,
    }
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tok, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(d, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "unk_token": "<unk>"}, f,
                  indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": cfg["bos_token_id"],
                   "eos_token_id": cfg["eos_token_id"], "do_sample": True,
                   "temperature": 0.7, "top_p": 0.95, "transformers_version": cfg["transformers_version"]},
                  f, indent=2)
        f.write("\n")


def write_config(d, cfg):
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def sample(model, sp, prompt_ids, n, temp, top_k, seed, stop=None):
    """Plain autoregressive sampling with the reference model (full recompute)."""
    g = torch.Generator().manual_seed(seed)
    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(n):
            lg = model(torch.tensor(ids[-CTX:])[None])[0, -1].double()
            if temp == 0:
                t = int(lg.argmax())
            else:
                v, ix = (lg / temp).topk(top_k)
                t = int(ix[torch.multinomial(v.softmax(-1), 1, generator=g)])
            if t == stop:
                break
            ids.append(t)
    return sp.decode(ids[len(prompt_ids):])


def plot_loss(work, out, ppl):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(open(os.path.join(work, "loss.csv"))))
    tok = np.array([float(r["tokens"]) for r in rows]) / 1e6
    loss = np.array([float(r["loss"]) for r in rows])
    k = 25
    sm = np.convolve(loss, np.ones(k) / k, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(tok, loss, color="#bbbbbb", lw=0.8, label="training loss (per step)")
    ax.plot(tok[k - 1:], sm, color="#1f5fa8", lw=1.8, label="running mean of %d steps" % k)
    ax.axhline(math.log(ppl), color="#c0392b", ls="--", lw=1.2,
               label="held-out, bf16 weights: ln(ppl %.2f) = %.3f" % (ppl, math.log(ppl)))
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("ds demo model (deepseek_v2, %.1fM params) on Jane Austen" % (model_params(CONFIG) / 1e6))
    ax.set_ylim(max(0, sm.min() - 0.5), min(loss.max(), 8.5))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss.png"))


def model_params(cfg):
    return sum(p.numel() for p in ref.CausalLM(cfg).parameters())


def export(work, out, group_size=64):
    cfg = dict(CONFIG)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(work, "tokenizer.model"))
    model = ref.CausalLM(cfg)
    model.load_state_dict(torch.load(os.path.join(work, "train.pt")))
    model.eval()
    os.makedirs(out, exist_ok=True)
    # --- bf16 checkpoint
    tens = {k: ("BF16", bf16_bytes(v), v.shape) for k, v in model.state_dict().items()}
    write_safetensors(os.path.join(out, "model.safetensors"), tens)
    write_config(out, cfg)
    write_tokenizer_files(work, out, cfg)
    # --- AWQ copy: calibration on 16 training windows
    data = np.load(os.path.join(work, "train.npy")).astype(np.int64)
    g = torch.Generator().manual_seed(SEED + 2)
    offs = torch.randint(0, len(data) - CTX, (16,), generator=g).tolist()
    calib = [torch.from_numpy(data[o:o + CTX]) for o in offs]
    # the float model the AWQ copy is made from is the bf16 one (as AutoAWQ would load it)
    mb = ref.build_model(out, torch.float64)
    qm, packed = awq_quantize(mb, calib, group_size)
    ad = os.path.join(out, "awq")
    os.makedirs(ad, exist_ok=True)
    tens = {}
    for k, v in qm.state_dict().items():
        p = k[:-len(".weight")]
        if p in packed:
            qw, qz, sc = packed[p]
            tens[p + ".qweight"] = ("I32", qw.astype("<i4").tobytes(), qw.shape)
            tens[p + ".qzeros"] = ("I32", qz.astype("<i4").tobytes(), qz.shape)
            tens[p + ".scales"] = ("F16", sc.tobytes(), sc.shape)
        else:
            tens[k] = ("BF16", bf16_bytes(v), v.shape)
    write_safetensors(os.path.join(ad, "model.safetensors"), tens)
    qcfg = dict(cfg, quantization_config={
        "bits": 4, "group_size": group_size, "modules_to_not_convert": None,
        "quant_method": "awq", "version": "gemm", "zero_point": True})
    write_config(ad, qcfg)
    write_tokenizer_files(work, ad, cfg)
    # --- held-out perplexity of the reference on the exported files
    held = np.load(os.path.join(work, "heldout.npy")).tolist()
    with open(os.path.join(out, "heldout.ids"), "w") as f:
        f.write(" ".join(map(str, held)) + "\n")
    res = {"ctx_size": CTX, "scheme": "forward.py --perplexity (llama-perplexity windows)"}
    for name, d in (("bf16", out), ("awq_dequant", ad)):
        m = ref.build_model(d, torch.float32)       # float32: f64 differs by ~1e-6 relative
        ppl, n, nw, nll = ref.perplexity(m, held, CTX)
        res[name] = {"perplexity": ppl, "tokens": n, "windows": nw, "nll_sum": nll}
        log("held-out perplexity %s: %.4f over %d tokens" % (name, ppl, n))
    with open(os.path.join(out, "perplexity.json"), "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    # --- samples and the loss plot
    mb.set_mla_mode("naive")
    prompts = [("It was a fine morning, and", False),
               ("User: What do you think of Mr. Darcy?\n\nAssistant:", True)]
    samples = []
    for text, chat in prompts:
        ids = [sp.bos_id()] + sp.encode(text)
        out_text = sample(mb, sp, ids, 80, 0.7, 40, SEED, stop=sp.eos_id() if chat else None)
        samples.append({"prompt": text, "ids": ids, "continuation": out_text})
        log("sample: %r -> %r" % (text, out_text))
    with open(os.path.join(out, "samples.json"), "w") as f:
        json.dump(samples, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(out, "prompt.txt"), "w") as f:
        f.write(prompts[0][0] + "\n")
    import shutil
    shutil.copy(os.path.join(work, "loss.csv"), os.path.join(out, "loss.csv"))
    rows = list(csv.DictReader(open(os.path.join(work, "loss.csv"))))
    last = [float(r["loss"]) for r in rows[-25:]]
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump({"parameters": model_params(cfg), "steps": len(rows),
                   "tokens": int(rows[-1]["tokens"]), "seconds": float(rows[-1]["seconds"]),
                   "final_loss_mean_last_25_steps": sum(last) / len(last),
                   "train_stream_tokens": int(len(data))}, f, indent=2)
        f.write("\n")
    plot_loss(work, out, res["bf16"]["perplexity"])


# ----------------------------------------------------------------------------
# the multi-token-prediction (MTP) module, trained with the main model frozen

MTP_STEPS = 400
MTP_CSV = "mtp-loss.csv"


class MTP(torch.nn.Module):
    """DeepSeek-V3's MTP module at depth 1 (docs/deepseek.md section 10): at
    position i, eh_proj [enorm(Emb(t_i+1)) ; hnorm(h_i)] (the embedding
    first, as vLLM and SGLang load the weight), one decoder layer (layer
    N = num_hidden_layers, an MoE layer by the config's rule), then
    shared_head.norm and the main model's output head; h_i is the main
    model's hidden state after its final norm (what vLLM's and SGLang's
    proposers pass). Embedding and head are the main model's (shared)."""

    def __init__(self, cfg):
        super().__init__()
        H, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        self.enorm = ref.RMSNorm(H, eps)
        self.hnorm = ref.RMSNorm(H, eps)
        self.eh_proj = torch.nn.Linear(2 * H, H, bias=False)
        self.layer = ref.Layer(cfg, cfg["num_hidden_layers"])
        self.head_norm = ref.RMSNorm(H, eps)

    def forward(self, h, e, rope):
        x = self.eh_proj(torch.cat([self.enorm(e), self.hnorm(h)], -1))
        return self.head_norm(self.layer(x, rope))

    def hf_state(self, N):
        """Parameters under the checkpoint's names (model.layers.N.*)."""
        pre = "model.layers.%d." % N
        out = {pre + "enorm.weight": self.enorm.weight,
               pre + "hnorm.weight": self.hnorm.weight,
               pre + "eh_proj.weight": self.eh_proj.weight,
               pre + "shared_head.norm.weight": self.head_norm.weight}
        for k, v in self.layer.state_dict().items():
            out[pre + k] = v
        return out


def mtp_init(mtp, main):
    """Start from the main model's last decoder layer, eh_proj passing the
    hidden half through (identity) and the embedding half small: the module
    begins as one more layer over h_i and learns to use the next token."""
    g = torch.Generator().manual_seed(SEED + 3)
    H = main.cfg["hidden_size"]
    with torch.no_grad():
        mtp.layer.load_state_dict(main.model.layers[-1].state_dict())
        w = torch.randn(H, 2 * H, generator=g) * 0.02
        w[:, H:] += torch.eye(H)
        mtp.eh_proj.weight.copy_(w)


def mtp_batch(data, off, mtp, main, rope):
    """Distillation targets for the module: at position i (0..CTX-2) it
    sees h_i and token i+1 and learns the main model's distribution at
    position i+1, the one verification compares its draft with."""
    ids = torch.stack([data[o:o + CTX] for o in off])
    with torch.no_grad():
        h = main.hidden(ids)
        teacher = main.lm_head(h[:, 1:]).float().log_softmax(-1)
        emb = main.model.embed_tokens(ids[:, 1:])
    out = mtp(h[:, :-1], emb, rope)
    logp = main.lm_head(out).float().log_softmax(-1)
    kl = (teacher.exp() * (teacher - logp)).sum(-1).mean()
    agree = (logp.argmax(-1) == teacher.argmax(-1)).float().mean()
    return kl, agree


def mtp_aux(mtp, batch, alpha):
    """The MoE layer's sequence-wise balance loss, as in the main training."""
    m = mtp.layer.mlp
    if not isinstance(m, ref.MoE) or m.last is None:
        return torch.zeros(())
    idx, s = m.last
    E, k = s.shape[-1], idx.shape[-1]
    s = s.view(batch, -1, E)
    ce = torch.zeros(batch, E).scatter_add_(1, idx.view(batch, -1),
                                            torch.ones(batch, idx.view(batch, -1).shape[1]))
    ce = ce / (s.shape[1] * k / E)
    return (ce * s.mean(1)).sum(1).mean() * alpha


def train_mtp(work, out, steps, batch, lr_max, log_every=10):
    """Train the MTP module on the same stream, the shipped main model frozen
    (its BF16 weights, read back from out/), and save it to work/mtp.pt."""
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    data = torch.from_numpy(np.load(os.path.join(work, "train.npy")).astype(np.int64))
    main = ref.build_model(out, torch.float32)
    for p in main.parameters():
        p.requires_grad_(False)
    cfg = dict(main.cfg)
    mtp = MTP(cfg)
    mtp_init(mtp, main)
    mtp.train()
    decay = [p for p in mtp.parameters() if p.dim() >= 2]
    nodecay = [p for p in mtp.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr_max, betas=(0.9, 0.95), eps=1e-8)
    warm = max(1, steps // 25)
    g = torch.Generator().manual_seed(SEED + 4)
    rope = main.rope(CTX - 1, torch.float32)
    rows, t0 = [], time.time()
    for step in range(1, steps + 1):
        lr = lr_max * (step / warm if step <= warm else
                       0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warm) / (steps - warm))))
        for grp in opt.param_groups:
            grp["lr"] = lr
        off = torch.randint(0, len(data) - CTX, (batch,), generator=g)
        with torch.cpu.amp.autocast(dtype=torch.bfloat16):
            kl, agree = mtp_batch(data, off, mtp, main, rope)
        la = mtp_aux(mtp, batch, cfg["aux_loss_alpha"])
        opt.zero_grad(set_to_none=True)
        (kl + la).backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        rows.append((step, step * batch * (CTX - 1), float(kl), float(agree), float(la), lr,
                     time.time() - t0))
        if step % log_every == 0 or step == steps:
            log("mtp step %d/%d kl %.4f agree %.3f aux %.4f lr %.2e %.0fs"
                % (step, steps, rows[-1][2], rows[-1][3], rows[-1][4], lr, rows[-1][6]))
    with open(os.path.join(work, MTP_CSV), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "positions", "kl", "top1_agreement", "aux_loss", "lr", "seconds"])
        w.writerows(rows)
    torch.save(mtp.state_dict(), os.path.join(work, "mtp.pt"))
    log("mtp: trained %d steps in %.0f s" % (steps, time.time() - t0))


def raw_safetensors(path):
    """{name: (dtype, raw bytes, shape)} of a safetensors file, bytes as stored."""
    with open(path, "rb") as f:
        buf = f.read()
    n = int.from_bytes(buf[:8], "little")
    hdr = json.loads(buf[8:8 + n])
    data = buf[8 + n:]
    return {k: (v["dtype"], data[v["data_offsets"][0]:v["data_offsets"][1]], v["shape"])
            for k, v in hdr.items() if k != "__metadata__"}


def export_mtp(work, out, group_size=64):
    """Add the trained module to out/ (BF16) and out/awq/ (its decoder
    layer's Linears quantized by the AutoAWQ zero-point rule, the rest
    BF16), config.json's num_nextn_predict_layers = 1. The main model's
    tensors are copied byte for byte. The shared embedding and head are
    not stored again (a loader takes the main model's; ds-convert counts
    them as shared)."""
    torch.set_grad_enabled(False)
    cfg = json.load(open(os.path.join(out, "config.json")))
    N = cfg["num_hidden_layers"]
    base = dict(cfg)
    base.pop("num_nextn_predict_layers", None)
    mtp = MTP(base)
    mtp.load_state_dict(torch.load(os.path.join(work, "mtp.pt")))
    state = {k: v.float() for k, v in mtp.hf_state(N).items()}
    pre = "model.layers.%d." % N
    for d, quant in ((out, False), (os.path.join(out, "awq"), True)):
        path = os.path.join(d, "model.safetensors")
        tens = {k: v for k, v in raw_safetensors(path).items() if not k.startswith(pre)}
        for k, v in state.items():
            mod = k[:-len(".weight")]
            inner = mod[len(pre):]
            if quant and k.endswith(".weight") and v.dim() == 2 and \
                    inner.startswith(("self_attn.", "mlp.")) and ".gate." not in k + ".":
                q, z, s = awq_rtn(v.double(), group_size)
                qw, qz, sc = pack_awq_gemm(q, z, s)
                tens[mod + ".qweight"] = ("I32", qw.astype("<i4").tobytes(), qw.shape)
                tens[mod + ".qzeros"] = ("I32", qz.astype("<i4").tobytes(), qz.shape)
                tens[mod + ".scales"] = ("F16", sc.tobytes(), sc.shape)
            else:
                tens[k] = ("BF16", bf16_bytes(v), v.shape)
        write_safetensors(path, tens)
        c = json.load(open(os.path.join(d, "config.json")))
        c["num_nextn_predict_layers"] = 1
        write_config(d, c)
    import shutil
    shutil.copy(os.path.join(work, MTP_CSV), os.path.join(out, MTP_CSV))
    rows = list(csv.DictReader(open(os.path.join(work, MTP_CSV))))
    last = rows[-25:]
    with open(os.path.join(out, "training-mtp.json"), "w") as f:
        json.dump({"parameters": sum(p.numel() for p in mtp.parameters()),
                   "steps": len(rows), "seconds": float(rows[-1]["seconds"]),
                   "final_kl_mean_last_25_steps": sum(float(r["kl"]) for r in last) / len(last),
                   "final_top1_agreement_mean_last_25_steps":
                       sum(float(r["top1_agreement"]) for r in last) / len(last)}, f, indent=2)
        f.write("\n")
    log("mtp: added to %s and %s/awq" % (out, out))


def mtp_data(work, out):
    """The training stream, rebuilt with the shipped tokenizer (the data
    stage trains one only when work/ has none)."""
    import shutil
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(os.path.join(work, "train.npy")):
        shutil.copy(os.path.join(out, "tokenizer.model"), os.path.join(work, "tokenizer.model"))
        prepare_data(work)



def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "testdata", "demo"))
    ap.add_argument("--work", default="/tmp/ds-train-demo")
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--stop-after", type=int, default=None,
                    help="stop after this many steps of the --steps schedule")
    ap.add_argument("--stage", choices=("all", "data", "train", "export", "mtp"), default="all")
    ap.add_argument("--mtp-steps", type=int, default=MTP_STEPS)
    args = ap.parse_args()
    random.seed(SEED)
    np.random.seed(SEED)
    if args.stage in ("all", "data"):
        prepare_data(args.work)
    if args.stage in ("all", "train"):
        train(args.work, args.steps, args.batch, args.lr, args.stop_after)
    if args.stage in ("all", "export"):
        export(args.work, args.out)
    if args.stage in ("all", "mtp"):
        mtp_data(args.work, args.out)
        train_mtp(args.work, args.out, args.mtp_steps, args.batch, args.lr)
        export_mtp(args.work, args.out)


if __name__ == "__main__":
    main()
