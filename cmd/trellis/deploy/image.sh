#!/bin/sh
# Assembles in DIR the build context of the `trellis serve` image (see
# Dockerfile, which it copies there): the binary built with no cgo and
# the build tag static (no dynamic loader, no C library: it loads none at
# run time), this machine's CA certificates (Debian's ca-certificates),
# an /etc/passwd naming the user 65532, and the repository's flows,
# prompts and schemas; and, beside them and in the image, its SBOM
# (SPDX 2.3, DIR/sbom.spdx.json): the binary's Go modules as its build
# information records them, and the Debian package of the certificates.
# `make image` then builds it: docker build -t IMAGE DIR.
set -eu
[ $# -eq 1 ] || { echo "usage: image.sh DIR" >&2; exit 2; }
dir=$1
repo=$(cd "$(dirname "$0")/../../.." && pwd)
rootfs=$dir/rootfs
rm -rf "$dir"
mkdir -p "$rootfs/srv/trellis" "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/usr/share/doc/trellis" "$dir/state"
chmod 1777 "$rootfs/tmp"
cp "$repo/cmd/trellis/deploy/Dockerfile" "$dir/Dockerfile"

# timetzdata: time zones without /usr/share/zoneinfo; static: no C
# library loaded at run time (the voice agent's Opus codec is not in it)
version=$(cd "$repo" && git describe --always --dirty 2>/dev/null || echo unknown)
(cd "$repo" && CGO_ENABLED=0 ${GO:-go} build -trimpath -tags timetzdata,static \
	-ldflags="-s -w -X github.com/trellisflow/trellis/cmd/trellis/internal/cli.version=$version" -o "$rootfs/trellis" ./cmd/trellis)
if ldd "$rootfs/trellis" >/dev/null 2>&1; then
	echo "image.sh: the binary is linked dynamically: the image carries no C library" >&2
	exit 1
fi

debs=
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
	cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
	if dpkg-query -W ca-certificates >/dev/null 2>&1; then debs="--deb ca-certificates"; fi
else
	echo "image.sh: no /etc/ssl/certs/ca-certificates.crt (Debian's ca-certificates): the image will not trust HTTPS servers" >&2
fi
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/srv/trellis:/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"

# the flows, without Go files, benchmarks and test data
tar -C "$repo" --exclude='*.go' --exclude='flows/bench' --exclude='testdata' -cf - flows prompts schemas |
	tar -C "$rootfs/srv/trellis" -xf -

# the SBOM, beside the image and in it
"$rootfs/trellis" dev sbom --name "trellis-$version" $debs "$rootfs/trellis" > "$dir/sbom.spdx.json"
cp "$dir/sbom.spdx.json" "$rootfs/usr/share/doc/trellis/sbom.spdx.json"
