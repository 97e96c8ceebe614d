#!/usr/bin/env bash
# The main job on bundled fixtures: validate the bundled CDI specs and list their devices.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
PYTHON=${PYTHON:-python3}
echo "== ateom cdi validate cdi_specs/valid"
"$PYTHON" -m ateom cdi validate cdi_specs/valid
echo "== ateom cdi devices --spec-dir cdi_specs/valid"
"$PYTHON" -m ateom cdi devices --spec-dir cdi_specs/valid
