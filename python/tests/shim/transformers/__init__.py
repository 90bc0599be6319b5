"""A stand-in for transformers' LlamaConfig and LlamaForCausalLM: the
config of a tiny Llama as transformers 5.23 gives it (to_dict(), and
to_json_string() as save_pretrained writes it; fixtures/llama_config.json)
and the model's module tree with Hugging Face's paths."""

import json
import os

from torch import nn

_FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "llama_config.json")


class LlamaConfig:
    def __init__(self):
        with open(_FIXTURE) as f:
            doc = json.load(f)
        self._dict, self._diff = doc["to_dict"], doc["to_json_string"]
        for k, v in self._dict.items():
            setattr(self, k, v)

    def to_dict(self):
        return dict(self._dict)

    def to_json_string(self, use_diff=True):
        return json.dumps(self._diff if use_diff else self._dict, indent=2, sort_keys=True) + "\n"


class _Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        head_dim = c.hidden_size // c.num_attention_heads
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * head_dim, c.hidden_size, bias=False)


class _MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)


class _Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = _Attention(c)
        self.mlp = _MLP(c)
        self.input_layernorm = nn.Module()
        self.post_attention_layernorm = nn.Module()


class _Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([_Layer(c) for _ in range(c.num_hidden_layers)])
        self.norm = nn.Module()
        self.rotary_emb = nn.Module()


class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = _Model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
