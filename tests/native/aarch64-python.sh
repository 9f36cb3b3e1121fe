#!/usr/bin/env bash
# An aarch64 CPython with TVM, run under qemu-user, for the aarch64 RPC server test
# (tests/test_rpc_aarch64.py): Debian's python3.11:arm64 and its libraries unpacked into
# DEST/root (nothing installed on this machine), the aarch64 wheels of TVM and its runtime
# dependencies unpacked into DEST/site, and DEST/python-aarch64 to start it.
# Needs root (dpkg --add-architecture arm64), Debian's qemu-user and the registries.
# Usage: tests/native/aarch64-python.sh DEST
set -euo pipefail
dest=$(realpath -m "${1:?usage: aarch64-python.sh DEST}")
here=$(cd "$(dirname "$0")/../.." && pwd)
tvm=$(grep -o 'apache-tvm==[^"]*' "$here/pyproject.toml")
ffi=$(grep -o 'apache-tvm-ffi==[^"]*' "$here/pyproject.toml")
mkdir -p "$dest/debs" "$dest/root" "$dest/site" "$dest/wheels"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
    apt-get update -q >/dev/null
fi
cd "$dest/debs"
apt-get download -q python3.11-minimal:arm64 libpython3.11-minimal:arm64 \
    libpython3.11-stdlib:arm64 libc6:arm64 zlib1g:arm64 libexpat1:arm64 libffi8:arm64 \
    libssl3:arm64 libbz2-1.0:arm64 liblzma5:arm64 libgcc-s1:arm64 libstdc++6:arm64 \
    libgomp1:arm64 libcrypt1:arm64 libuuid1:arm64 libtinfo6:arm64 libncursesw6:arm64 \
    libsqlite3-0:arm64 libreadline8:arm64 libdb5.3:arm64 libnsl2:arm64 libtirpc3:arm64 \
    libgssapi-krb5-2:arm64 libkrb5-3:arm64 libk5crypto3:arm64 libkrb5support0:arm64 \
    libcom-err2:arm64 libkeyutils1:arm64 >/dev/null
for deb in *.deb; do dpkg -x "$deb" "$dest/root"; done
python3 -m pip download -q -d "$dest/wheels" --only-binary=:all: --python-version 3.11 \
    --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
    "$tvm" "$ffi" numpy psutil cloudpickle ml_dtypes typing_extensions
for wheel in "$dest"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$dest/site"; done
cat > "$dest/python-aarch64" <<'SH'
#!/bin/sh
# aarch64 CPython under qemu-user; -0 makes sys.executable this script, so that the
# processes Python starts (TVM's RPC server forks workers) run under qemu too
HERE=$(dirname "$(readlink -f "$0")")
export PYTHONHOME="$HERE/root/usr" PYTHONPATH="$HERE/site"
exec qemu-aarch64 -L "$HERE/root" -0 "$HERE/python-aarch64" "$HERE/root/usr/bin/python3.11" "$@"
SH
chmod +x "$dest/python-aarch64"
"$dest/python-aarch64" -c "import platform, tvm; print('aarch64 python:', platform.machine(), 'tvm', tvm.__version__)"
