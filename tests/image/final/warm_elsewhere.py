"""A package compiled ahead of time for another CPU is never used: torchstack_warm refuses it and
compiles the model here, with eager mode's answer. Runs in a final image (`python3 warm_elsewhere.py`,
with a /tmp that allows exec); the final checks run it after compile.py, in its process.

It copies the image's store to /tmp and rewrites the example's package there as an image baked on
a machine with other vector instructions would hold it: its key says another CPU, and it sits under
that key's folder.
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

STORE = Path(tempfile.mkdtemp())
shutil.copytree("/opt/torchstack/warm", STORE, dirs_exist_ok=True)
os.environ["TORCHSTACK_WARM_DIR"] = str(STORE)  # read when torchstack_warm is imported
sys.path.insert(0, "/opt/torchstack/examples")

import torch  # noqa: E402
import torchstack_warm  # noqa: E402
from warm import NAME, model_and_inputs  # noqa: E402

for key_file in STORE.glob(f"{NAME}/*/key.json"):
    key = json.loads(key_file.read_text())
    key["cpu"] = "SVE512 asimd sve sve2"
    key_file.write_text(json.dumps(key))
    key_file.parent.rename(key_file.parent.parent / torchstack_warm._digest(key))

model, images = model_and_inputs(batch=1)  # compile.py's batch: its compile serves this one
run, how = torchstack_warm.load(NAME, model, (images,))
assert how == "compiled", f"a package made for another CPU was used ({how})"
with torch.inference_mode():
    torch.testing.assert_close(run(images), model(images), rtol=1e-3, atol=1e-3)
print("warm_elsewhere: the package made for another CPU was refused; compiled here, matching eager mode")
