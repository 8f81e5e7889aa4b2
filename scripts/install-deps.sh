#!/bin/sh
# Installs the Debian 12 packages tractd needs to build, run (lavapipe is the
# Vulkan fallback when there is no GPU) and test. Installs only what is missing.
set -eu
packages="make gcc clang pkg-config libvulkan-dev libshaderc-dev glslang-dev spirv-tools libjansson-dev
libnifti2-dev liblapacke-dev zlib1g-dev libmicrohttpd-dev libsystemd-dev libssl-dev
libcurl4-openssl-dev curl mesa-vulkan-drivers libcmocka-dev libzip-dev libclang-rt-14-dev clang-tidy
help2man groff-base slurm-wlm munge
python3-dipy python3-nibabel python3-pytest python3-yaml python3-venv systemd mrtrix3"
missing=""
for p in $packages; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -q
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
