"""Convert the shipped Gemma 3 270M GGUF to a Hugging Face folder that vLLM serves.

Runs inside the vLLM environment (torch, transformers, gguf, accelerate), as a script with no
labs_lib imports:  python hf_convert.py GGUF_PATH OUT_DIR [--dtype bfloat16|float32]

The weights are the GGUF's own numbers, dequantized: both engines then serve the same model.
Two fixes the plain conversion needs (measured): the saved tokenizer does not add BOS, and Gemma
without BOS is noise, so add_bos_token is set in the tokenizer itself; and the GGUF carries no
chat template, so Gemma's turn format is written as the tokenizer's chat template.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import time
from pathlib import Path

# Gemma's documented turn format (<start_of_turn>user … <end_of_turn>), system text folded into the first user turn.
GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- set sys = '' -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{%- set sys = m['content'] + '\\n\\n' -%}"
    "{%- else -%}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\\n"
    "{{ (sys if loop.first or loop.index0 == 1 else '') + m['content'] }}<end_of_turn>\\n{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}<start_of_turn>model\\n{%- endif -%}"
)


def convert(gguf_path: Path, out_dir: Path, dtype: str = "bfloat16") -> None:
    import gguf
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # transformers parses the whole file again for the tokenizer, the config and the weights; parsing the 262k-token
    # vocabulary takes ~20 s each time here, and the reader only reads (a memory map): parse it once
    gguf.GGUFReader = functools.lru_cache(maxsize=1)(gguf.GGUFReader)  # type: ignore[misc,assignment]
    started = time.perf_counter()
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"convert: reading {gguf_path.name} …", file=sys.stderr, flush=True)
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
    for holder in (model, model.config):  # transformers refuses to save a model still marked GGUF-quantized
        for attr in ("hf_quantizer", "quantization_config"):
            if hasattr(holder, attr):
                try:
                    delattr(holder, attr)
                except AttributeError:
                    setattr(holder, attr, None)
    model.is_quantized = False
    print(f"convert: writing {dtype} safetensors …", file=sys.stderr, flush=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.add_bos_token = True
    tokenizer.chat_template = GEMMA_TEMPLATE
    tokenizer.save_pretrained(tmp)
    cfg_path = tmp / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["add_bos_token"] = True
    cfg["chat_template"] = GEMMA_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2))
    (tmp / "chat_template.jinja").write_text(GEMMA_TEMPLATE)
    check = AutoTokenizer.from_pretrained(tmp)
    ids = check("The")["input_ids"]
    if ids[:1] != [check.bos_token_id]:
        raise SystemExit(f"convert: error: the saved tokenizer does not add BOS ({ids[:3]})")
    (tmp / "labs_conversion.json").write_text(json.dumps({"source": str(gguf_path), "dtype": dtype}))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    print(f"convert: done in {time.perf_counter() - started:.0f} s -> {out_dir}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    dtype = args[args.index("--dtype") + 1] if "--dtype" in args else "bfloat16"
    positional = [a for a in args if not a.startswith("--") and a != dtype]
    convert(Path(positional[0]), Path(positional[1]), dtype)
