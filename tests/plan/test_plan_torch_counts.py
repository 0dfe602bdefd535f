"""test_plan_torch_counts.py: parameter counts of `cohort estimate --json` against PyTorch: each
model is built from torch.nn modules on the meta device (no memory), its shared parameters
counted once, and its largest layer found the way DeepSpeed (largest single module) and
accelerate (largest block or embedding) find it."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    from torch import nn
except ImportError:
    print("torch not importable: skipped")
    sys.exit(77)

COHORT = os.environ["COHORT"]
META = dict(device="meta")


class GPT2Block(nn.Module):
    def __init__(self, h, f):
        super().__init__()
        self.ln_1 = nn.LayerNorm(h, **META)
        self.c_attn = nn.Linear(h, 3 * h, **META)
        self.c_proj = nn.Linear(h, h, **META)
        self.ln_2 = nn.LayerNorm(h, **META)
        self.c_fc = nn.Linear(h, f, **META)
        self.mlp_proj = nn.Linear(f, h, **META)


class GPT2(nn.Module):
    def __init__(self, L, h, v, pos, f):
        super().__init__()
        self.wte = nn.Embedding(v, h, **META)
        self.wpe = nn.Embedding(pos, h, **META)
        self.h = nn.ModuleList(GPT2Block(h, f) for _ in range(L))
        self.ln_f = nn.LayerNorm(h, **META)
        self.lm_head = nn.Linear(h, v, bias=False, **META)
        self.lm_head.weight = self.wte.weight  # tied


class LlamaBlock(nn.Module):
    def __init__(self, h, heads, kv, hd, f, attn_bias, mlp_bias):
        super().__init__()
        self.input_layernorm = nn.Parameter(torch.empty(h, **META))
        self.q_proj = nn.Linear(h, heads * hd, bias=attn_bias, **META)
        self.k_proj = nn.Linear(h, kv * hd, bias=attn_bias, **META)
        self.v_proj = nn.Linear(h, kv * hd, bias=attn_bias, **META)
        self.o_proj = nn.Linear(heads * hd, h, bias=attn_bias, **META)
        self.post_attention_layernorm = nn.Parameter(torch.empty(h, **META))
        self.gate_proj = nn.Linear(h, f, bias=mlp_bias, **META)
        self.up_proj = nn.Linear(h, f, bias=mlp_bias, **META)
        self.down_proj = nn.Linear(f, h, bias=mlp_bias, **META)


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, heads = c["hidden_size"], c["num_attention_heads"]
        kv = c.get("num_key_value_heads", heads)
        hd = c.get("head_dim", h // heads)
        ab, mb = c.get("attention_bias", False), c.get("mlp_bias", False)
        self.embed_tokens = nn.Embedding(c["vocab_size"], h, **META)
        self.layers = nn.ModuleList(LlamaBlock(h, heads, kv, hd, c["intermediate_size"], ab, mb)
                                    for _ in range(c["num_hidden_layers"]))
        self.norm = nn.Parameter(torch.empty(h, **META))
        self.lm_head = nn.Linear(h, c["vocab_size"], bias=False, **META)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight


def counts(model, blocks):
    total = sum(p.numel() for p in model.parameters())  # shared parameters appear once
    largest_module = max(sum(p.numel() for p in m.parameters(recurse=False))
                         for m in model.modules())
    groups = [sum(p.numel() for p in b.parameters()) for b in blocks]
    groups += [m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding)]
    return total, largest_module, max(groups)


def estimate(*args):
    out = subprocess.run([COHORT, "estimate", "--json", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"cohort estimate {args} failed: {out.stderr}")
    return json.loads(out.stdout)


failures = 0


def compare(label, model, blocks, args):
    global failures
    total, module, layer = counts(model, blocks)
    got = estimate(*args)
    mine = (got["parameters"], got["largest_module_parameters"], got["largest_layer_parameters"])
    ok = mine == (total, module, layer)
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {label}: torch {total:,} / {module:,} / {layer:,}, "
          f"cohort {mine[0]:,} / {mine[1]:,} / {mine[2]:,}")


for name, L, h in [("gpt2", 12, 768), ("gpt2-medium", 24, 1024),
                   ("gpt2-large", 36, 1280), ("gpt2-xl", 48, 1600)]:
    m = GPT2(L, h, 50257, 1024, 4 * h)
    compare(name, m, m.h, ["--model", name])

m = GPT2(3, 96, 1000, 128, 200)
compare("custom gpt", m, m.h, ["--layers", "3", "--dim", "96", "--heads", "4", "--vocab", "1000",
                               "--seq", "128", "--ffn", "200"])

configs = {
    "llama-2-7b": dict(model_type="llama", hidden_size=4096, intermediate_size=11008,
                       num_attention_heads=32, num_hidden_layers=32, num_key_value_heads=32,
                       vocab_size=32000, max_position_embeddings=4096,
                       tie_word_embeddings=False),
    "llama-3.2-1b": dict(model_type="llama", hidden_size=2048, intermediate_size=8192,
                         num_attention_heads=32, num_hidden_layers=16, num_key_value_heads=8,
                         head_dim=64, vocab_size=128256, max_position_embeddings=131072,
                         tie_word_embeddings=True),
    "mistral-7b": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336,
                       num_attention_heads=32, num_hidden_layers=32, num_key_value_heads=8,
                       vocab_size=32000, max_position_embeddings=32768, sliding_window=4096),
    "llama-biases": dict(model_type="llama", hidden_size=96, intermediate_size=200,
                         num_attention_heads=6, num_hidden_layers=2, num_key_value_heads=3,
                         vocab_size=300, max_position_embeddings=64, attention_bias=True,
                         mlp_bias=True, tie_word_embeddings=True),
}
with tempfile.TemporaryDirectory() as tmp:
    for label, c in configs.items():
        path = os.path.join(tmp, label + ".json")
        with open(path, "w") as f:
            json.dump(c, f)
        m = Llama(c)
        compare(label, m, m.layers, ["--config", path])

print(f"{failures} failed")
sys.exit(1 if failures else 0)
