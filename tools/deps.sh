#!/usr/bin/env bash
# Installs the Debian packages qwick builds and tests with (Debian 12). Safe to run repeatedly.
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config          # toolchain
  nlohmann-json3-dev libfmt-dev             # JSON, formatting
  libpcre2-dev libutf8proc-dev              # tokenizer: split regex, NFC
  libcpp-httplib-dev                        # HTTP server
  libgtest-dev                              # unit tests
  clang libclang-rt-14-dev                  # libFuzzer targets
  nodejs npm python3-jinja2                 # reference-library tests (tokenizers, Jinja renderers)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
