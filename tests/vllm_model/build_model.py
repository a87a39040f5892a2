"""Build a tiny random-weight Llama model and its tokenizer, for a real vLLM on a CPU.

Why: the vLLM end-to-end test and ``benchmarks/vllm_bench_compare.py`` need a real model
directory that vLLM can load (``config.json``, safetensors weights, a fast tokenizer with a
chat template), but no model can be downloaded. The weights are random (seeded), so the
text it generates is noise; what matters is that vLLM runs the same code paths as for a
real checkpoint: tokenization, chat templating, prefill, batched decode, streaming.

The BPE tokenizer is trained on ``corpus.txt`` beside this file (byte-level, so any prompt
encodes without unknown tokens). The model is two decoder layers, hidden size 128, two
attention heads of 64 (the CPU attention backend supports head sizes 32..512), one KV head.

Run it with the vLLM environment's interpreter (it needs torch, transformers, tokenizers)::

    .venv-vllm/bin/python tests/vllm_model/build_model.py --out .venv-vllm/tiny-llama

A directory already built from the same inputs is left alone (a stamp file records a hash
of this script and the corpus), so calling it again costs nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus.txt"
STAMP = ".tiny-model-stamp"

#: Special tokens: end of text (EOS), and the role markers of the chat template.
SPECIAL_TOKENS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
EOS = "<|end|>"
BOS = "<|endoftext|>"

#: A minimal chat template: role marker, content, end marker; then the assistant's marker.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

#: Model shape (a Llama): small enough to start in seconds and decode fast on two cores.
MODEL_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
VOCAB_SIZE = 1024
SEED = 1234


def inputs_hash() -> str:
    """Hash of everything the output depends on: this script and the training text."""
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(CORPUS.read_bytes())
    return h.hexdigest()[:16]


def build_tokenizer(out: Path):
    """Train a byte-level BPE on the corpus; save it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(CORPUS)], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=BOS, unk_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = MODEL_SHAPE["max_position_embeddings"]
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, tokenizer) -> None:
    """A seeded random-weight Llama whose vocabulary matches the tokenizer."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    vocab = -(-len(tokenizer) // 64) * 64  # padded to a multiple of 64, as real checkpoints are
    config = LlamaConfig(
        vocab_size=vocab,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(BOS),
        **MODEL_SHAPE,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.config.dtype = "float32"
    model.save_pretrained(out)
    GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    ).save_pretrained(out)


def build(out: Path, force: bool = False) -> Path:
    """Build the model directory ``out`` unless it is already built from the same inputs."""
    digest = inputs_hash()
    stamp = out / STAMP
    if not force and stamp.is_file() and stamp.read_text().strip() == digest:
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tokenizer = build_tokenizer(tmp)
    build_model(tmp, tokenizer)
    (tmp / STAMP).write_text(digest + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="model directory to create")
    p.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = p.parse_args(argv)
    out = build(args.out.resolve(), force=args.force)
    config = json.loads((out / "config.json").read_text())
    print(
        f"tiny model: {out} ({config['architectures'][0]}, hidden {config['hidden_size']}, "
        f"{config['num_hidden_layers']} layers, vocab {config['vocab_size']})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
