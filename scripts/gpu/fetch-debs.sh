#!/usr/bin/env bash
# Downloads (here, where Debian's archive is reachable) the Debian 12 packages
# that scripts/gpu/build.sh unpacks on a GPU machine without registry access.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .debs && cd .debs
apt-get download libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev \
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0 \
  libcivetweb1 libcivetweb-dev civetweb libgtest-dev libyaml-cpp-dev libyaml-cpp0.7 zlib1g-dev \
  libcurl4-openssl-dev libssl-dev libarchive-dev libarchive13 libb2-1
