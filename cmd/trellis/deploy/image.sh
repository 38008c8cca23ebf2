#!/bin/sh
# Assembles in DIR the build context of the `trellis serve` image (see
# Dockerfile, which it copies there): the binary built with no cgo, the
# dynamic loader and C libraries it needs (the voice's Opus codec is
# opened at run time through the C loader, so even this build is not
# fully static), this machine's CA certificates, an /etc/passwd naming
# the user 65532, and the repository's flows, prompts and schemas.
# `make image` then builds it: docker build -t IMAGE DIR.
set -eu
[ $# -eq 1 ] || { echo "usage: image.sh DIR" >&2; exit 2; }
dir=$1
repo=$(cd "$(dirname "$0")/../../.." && pwd)
rootfs=$dir/rootfs
rm -rf "$dir"
mkdir -p "$rootfs/srv/trellis" "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$dir/state"
chmod 1777 "$rootfs/tmp"
cp "$repo/cmd/trellis/deploy/Dockerfile" "$dir/Dockerfile"

# timetzdata: time zones without /usr/share/zoneinfo
(cd "$repo" && CGO_ENABLED=0 ${GO:-go} build -trimpath -ldflags='-s -w' -tags timetzdata -o "$rootfs/trellis" ./cmd/trellis)

# the loader and the libraries ldd names, at the paths the binary asks for
if ldd "$rootfs/trellis" >/dev/null 2>&1; then
	for lib in $(ldd "$rootfs/trellis" | grep -o '/[^ ]*'); do
		mkdir -p "$rootfs$(dirname "$lib")"
		cp -L "$lib" "$rootfs$lib"
	done
fi

if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
	cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
else
	echo "image.sh: no /etc/ssl/certs/ca-certificates.crt (Debian's ca-certificates): the image will not trust HTTPS servers" >&2
fi
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/srv/trellis:/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"

# the flows, without Go files, benchmarks and test data
tar -C "$repo" --exclude='*.go' --exclude='flows/bench' --exclude='testdata' -cf - flows prompts schemas |
	tar -C "$rootfs/srv/trellis" -xf -
