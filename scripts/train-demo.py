#!/usr/bin/python3
"""Train the embedded demo model (issue 9): a SentencePiece BPE tokenizer and a
small DeepSeek-V2-architecture model (MLA with q_lora_rank null, YaRN rope,
MoE with shared + routed experts, one dense first layer) on Jane Austen's six
novels as Debian ships them (r-cran-janeaustenr), then export a Hugging Face
checkpoint (bf16) and an AutoAWQ GEMM INT4 copy.

  scripts/train-demo.py [--out testdata/demo] [--work DIR] [--steps N]
                        [--stage all|data|train|export]

The model is scripts/ref/forward.py's CausalLM: training and the reference
forward pass are the same code, so the checkpoint means what the reference
(and a real DeepSeek-V2 checkpoint) means. Fixed seeds; CPU only.
Stages: data (text + tokenizer + ids), train (work/train.pt, loss.csv),
export (checkpoints, AWQ copy, perplexities, sample, loss PNG).
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

# DeepSeek-V2-Chat's template structure (deepseek_arch.md §8), written afresh.
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


def train(work, steps, batch, lr_max, log_every=10):
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
    for step in range(1, steps + 1):
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
        if step % log_every == 0 or step == steps:
            log("step %d/%d loss %.4f aux %.4f lr %.2e %.0fs"
                % (step, steps, rows[-1][2], rows[-1][3], lr, rows[-1][5]))
    with open(os.path.join(work, "loss.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "tokens", "loss", "aux_loss", "lr", "seconds"])
        w.writerows(rows)
    torch.save(model.state_dict(), os.path.join(work, "train.pt"))
    log("trained %d steps (%d tokens) in %.0f s" % (steps, steps * batch * CTX, time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "testdata", "demo"))
    ap.add_argument("--work", default="/tmp/ds-train-demo")
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--stage", choices=("all", "data", "train", "export"), default="all")
    args = ap.parse_args()
    random.seed(SEED)
    np.random.seed(SEED)
    if args.stage in ("all", "data"):
        prepare_data(args.work)
    if args.stage in ("all", "train"):
        train(args.work, args.steps, args.batch, args.lr)
    if args.stage in ("all", "export"):
        export(args.work, args.out)


if __name__ == "__main__":
    main()
