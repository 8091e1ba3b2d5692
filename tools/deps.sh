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
  clang-format                              # tools/check_style.sh (Debian 12's is version 14)
  python3-jinja2                            # reference renderer of the chat template
)
# Node.js runs the reference-library tests. Machines that already have node and npm (e.g. from
# NodeSource, whose nodejs conflicts with Debian's npm) keep theirs.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
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
