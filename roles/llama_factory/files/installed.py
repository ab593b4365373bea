"""Print the versions and locations of the torch family and LLaMA-Factory in this venv as JSON."""

import importlib.metadata
import json


def describe(name):
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return {"version": dist.version, "location": str(dist.locate_file(""))}


family = {name: describe(name) for name in ("torch", "torchvision", "torchaudio")}
lf = describe("llamafactory")
print(json.dumps(dict(family, llamafactory=lf["version"] if lf else None)))
