#!/bin/sh
# The README's first command: install what is missing, build, and track the
# built-in phantom on the default Vulkan device (lavapipe without a GPU).
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -j"$(nproc)"
make demo
