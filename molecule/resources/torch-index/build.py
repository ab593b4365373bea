"""A local stand-in for PyTorch's CPU wheel index (download.pytorch.org/whl/cpu), for the sandbox.

The sandbox trains with LLaMA-Factory, whose data code imports torchaudio, and PyTorch's CPU index
is unreachable from here. What this folder holds, and why each is honest:

- torch 2.13.0+cpu: the real wheel from this machine's pip find-links folder, hard-linked.
- torchaudio 2.11.1+cpu: PyPI's real torchaudio 2.11.1 wheel (py3-none, "requires torch 2.11 or
  newer, including all future releases"), with the one thing that makes it a CUDA build removed:
  its compiled extension, which links libcudart and libtorch_cuda and so cannot load beside a CPU
  torch. torchaudio's own loader treats a missing extension as a supported install ("the library
  file is not found ... pex format") and runs its Python code, which is all that text
  fine-tuning imports. The label says what it is: +cpu, like the index's own builds.

Usage: build.py OUTDIR   (idempotent; prints OUTDIR). The torchaudio wheel is downloaded from the
configured package index once and cached in OUTDIR/.download.
"""

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

TORCHAUDIO = "2.11.1"
LABEL = "cpu"
TORCH_WHEEL_GLOB = "torch-2.13.0+cpu-*.whl"


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def relabel_without_extension(source, outdir, version, label):
    """Rewrite a torchaudio wheel as VERSION+LABEL with no compiled extension, as a valid wheel."""
    old_info = f"torchaudio-{version}.dist-info"
    new_version = f"{version}+{label}"
    new_info = f"torchaudio-{new_version}.dist-info"
    target = outdir / f"torchaudio-{new_version}-py3-none-any.whl"
    if target.exists():
        return target
    records = []
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in sorted(src.infolist(), key=lambda i: i.filename):
            name = info.filename
            if name.startswith("torchaudio/lib/") and name.endswith(".so"):
                continue
            if name == f"{old_info}/RECORD":
                continue
            data = src.read(name)
            if name.startswith(old_info + "/"):
                name = new_info + name[len(old_info) :]
                if name.endswith("/METADATA"):
                    data = data.replace(f"Version: {version}\n".encode(), f"Version: {new_version}\n".encode(), 1)
                if name.endswith("/WHEEL"):
                    data = b"".join(
                        b"Tag: py3-none-any\n" if line.startswith(b"Tag: ") else line
                        for line in data.splitlines(keepends=True)
                    )
            dst.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
            records.append(_record_line(name, data))
        records.append(f"{new_info}/RECORD,,")
        dst.writestr(zipfile.ZipInfo(f"{new_info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), "\n".join(records) + "\n")
    partial.rename(target)
    return target


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTDIR", file=sys.stderr)
        return 2
    outdir = Path(argv[1])
    outdir.mkdir(parents=True, exist_ok=True)
    find_links = os.environ.get("INSTINCT_WHEELS", "/opt/wheels")
    torch_wheels = sorted(Path(find_links).glob(TORCH_WHEEL_GLOB))
    if not torch_wheels:
        print(f"no {TORCH_WHEEL_GLOB} in {find_links} (INSTINCT_WHEELS)", file=sys.stderr)
        return 1
    for wheel in torch_wheels:
        link = outdir / wheel.name
        if not link.exists():
            try:
                os.link(wheel, link)
            except OSError:
                shutil.copy2(wheel, link)
    download = outdir / ".download"
    download.mkdir(exist_ok=True)
    pypi = sorted(download.glob(f"torchaudio-{TORCHAUDIO}-*.whl"))
    if not pypi:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
             "--dest", str(download), f"torchaudio=={TORCHAUDIO}"],
            check=True,
        )  # fmt: skip
        pypi = sorted(download.glob(f"torchaudio-{TORCHAUDIO}-*.whl"))
    relabel_without_extension(pypi[0], outdir, TORCHAUDIO, LABEL)
    print(outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
