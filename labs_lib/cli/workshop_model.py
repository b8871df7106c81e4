"""`workshop-model`: the model that makes the lessons visible on this GPU (or a catalogue card), and its download."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("workshop-model", help="the model labs 02-05 serve on this GPU; --download fetches it once")
    p.add_argument("--gpu", help="a catalogue card to choose for (`labs capacity --help` lists them); default: this GPU")
    p.add_argument("--download", action="store_true", help="download it into the cache (size shown first) and record it")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..catalogs import compute_capability, gpu_spec
    from ..gpu import engine_card, read_gpus
    from ..workshop_model import choose, download, recorded

    if args.gpu:
        spec = gpu_spec(args.gpu)  # one line naming the catalogue's cards when unknown
        card, memory, capability = spec["name"], int(spec["memory_gib"] * 2**30), compute_capability(args.gpu)
    else:
        readings, no_gpu = read_gpus()
        found, why = engine_card(readings)
        if found is None:
            print(f"no workshop model: {why or no_gpu}; the labs serve the shipped Gemma 3 270M (--gpu NAME to plan a card)")
            return 0
        card, memory, capability = found.name, found.memory_total_bytes, found.compute_capability
    model = choose(memory, capability)
    if model is None:
        print(f"no workshop model for the {card} ({memory / 2**30:.1f} GiB): the labs serve the shipped Gemma 3 270M")
        return 0
    print(f"workshop model for the {card}: {model.repo}, {model.download_gb:.1f} GB to download once: {model.why}")
    if not args.download:
        held = recorded()
        print(f"recorded: {held['repo']} in {held['path']}" if held else "not downloaded: labs workshop-model --download")
        return 0
    entry = download(model, card)
    print(f"recorded: {entry['repo']} in {entry['path']}; labs 02-05 serve it on vLLM when their model is None")
    return 0
