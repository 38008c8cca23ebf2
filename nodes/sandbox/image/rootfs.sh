#!/bin/sh
# Builds the sandbox's file tree in DIR from this machine's Debian
# packages: Python 3 (python3.11-minimal, libpython3.11-stdlib), Node.js,
# and the few tools the sandbox uses (sh, sleep, prlimit, rm), with the shared
# libraries they load. The local backend runs jobs on the tree as it is
# (TRELLIS_SANDBOX_ROOT=DIR); `docker import` makes it the Docker image.
#
#   rootfs.sh DIR
set -eu
dir=$1
tmp=$dir.tmp
rm -rf "$tmp"
mkdir -p "$tmp"
copy() { # copy a file (following links) to the same path under the tree
	for f in "$@"; do
		if [ ! -e "$f" ]; then continue; fi
		mkdir -p "$tmp$(dirname "$f")"
		cp -L --preserve=mode "$f" "$tmp$f"
	done
}
for d in bin sbin lib lib64; do ln -s usr/$d "$tmp/$d"; done
mkdir -p "$tmp/usr/bin" "$tmp/usr/sbin" "$tmp/usr/lib" "$tmp/usr/lib64" "$tmp/etc" "$tmp/work" "$tmp/tmp" "$tmp/proc" "$tmp/dev"
py=$(readlink -f /usr/bin/python3)
lib=/usr/lib/$(basename "$py")
pkgs=$(dpkg -S "$py" "$lib/ast.py" "$lib/json/__init__.py" "$lib/subprocess.py" | cut -d: -f1 | sort -u)
for p in $pkgs; do
	dpkg -L "$p" | while read -r f; do
		case $f in /usr/share/*) continue ;; esac
		if [ -f "$f" ] && [ ! -L "$f" ]; then copy "$f"; fi
	done
done
ln -sf "$(basename "$py")" "$tmp/usr/bin/python3"
# the tree is read-only in the sandbox: Python's bytecode is compiled now
"$py" -m compileall -q -j 0 -d "$lib" "$tmp$lib" >/dev/null || true
copy "$(readlink -f "$(command -v node)")" /usr/bin/sh /usr/bin/dash /usr/bin/sleep /usr/bin/prlimit /usr/bin/rm
if [ ! -e "$tmp/usr/bin/node" ]; then cp -L "$(command -v node)" "$tmp/usr/bin/node"; fi
# the shared libraries every program and Python extension loads
find "$tmp" -type f \( -perm -u+x -o -name '*.so*' \) | while read -r f; do
	ldd "$f" 2>/dev/null | awk '/=>/ {print $3} /^\t\// {print $1}'
done | sort -u | while read -r lib; do
	if [ -n "$lib" ]; then copy "$lib"; fi
done
chmod 1777 "$tmp/work" "$tmp/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/work:/bin/sh\n' >"$tmp/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$tmp/etc/group"
ldconfig -r "$tmp" 2>/dev/null || true
rm -rf "$dir"
mv "$tmp" "$dir"
echo "$dir: $(du -sh "$dir" | cut -f1)"
