#!/usr/bin/env bash
# Installs the system packages streamfold needs to build (bindgen's libclang
# for RocksDB, OpenSSL headers for librdkafka's TLS), and only the missing
# ones: on a machine that has them this does nothing.
set -euo pipefail

packages=(libclang-dev clang libssl-dev pkg-config g++ make curl)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing system packages: ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
else
  sudo=
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
