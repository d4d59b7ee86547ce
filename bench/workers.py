"""What the benches share: each measurement runs in a fresh process of its own (the bench script itself, called
with --worker), which prints its result as JSON on its last line of output."""
import json
import subprocess
import sys


def run_worker(cmd, what):
    """Run a worker's command line and return the JSON it printed last; if it fails, stop with its stderr."""
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"the {what} worker failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])
