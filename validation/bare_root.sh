#!/usr/bin/env bash
# bare_root.sh — the README's two commands on a bare machine (.ci/run runs it after make check).
# A minimal Debian 12 root made with Debian's own tool (mmdebstrap --variant=minbase, plus make:
# the README's commands are make goals), with what a newly provisioned machine here has besides
# Debian copied in — its package access: apt sources and settings, pip settings, locally added CA
# certificates, the network identity files — and none of llmtrain's packages. A clean clone of
# this checkout (HEAD, or the commit given as $1) is copied in, and inside the root (chroot, in a
# private mount namespace with /proc, /dev, /dev/pts, /dev/shm and a tmpfs /tmp mounted; all of
# it unmounted on every exit, failures and signals included) it checks, in order:
#  1. `make` with nothing installed: stops with one line that names `make deps`;
#  2. `make deps` as an unprivileged user: exit 2, the package list and the modules, and nothing
#     installed;
#  3. `make demo` end to end (it installs what is missing, builds, trains, generates, reports),
#     and no step of its clean data skipped by the spike detector;
#  4. `make check-unit`, the first stage of make check: deps, the build, the unit tests.
# Each step is timed; the whole stays under BARE_ROOT_LIMIT seconds (900). The last line says
# "bare_root: N passed, N failed".
# Skipped (exit 77, the reason printed as the last line; never counted as passed): not root, no
# mmdebstrap and none can be installed, or no Debian root can be made (no mirror reachable).
# The base root is cached as a tarball (BARE_ROOT_CACHE, default
# /var/cache/llmtrain-ci/bookworm-minbase-make.tar); a missing or broken cache is made again.
# BARE_ROOT_KEEP=1 keeps the root (its path is printed) for a look after a failure.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=${1:-HEAD}
LIMIT=${BARE_ROOT_LIMIT:-900}
CACHE=${BARE_ROOT_CACHE:-/var/cache/llmtrain-ci/bookworm-minbase-make.tar}
START=$(date +%s)
say() { printf '[bare_root %4ds] %s\n' $(($(date +%s) - START)) "$*"; }
skip() { say "skipped: $*"; echo "bare_root: skipped: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root (chroot, mounts, apt-get inside the root)"
command -v unshare >/dev/null && command -v chroot >/dev/null || skip "needs unshare and chroot (util-linux, coreutils)"
if ! command -v mmdebstrap >/dev/null; then
    say "installing mmdebstrap (Debian's tool that makes the root)"
    { apt-get -o DPkg::Lock::Timeout=600 update -q && DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=600 install -y -q mmdebstrap; } >/tmp/bare_root_mmdebstrap.log 2>&1 ||
        skip "mmdebstrap is not installed and apt-get could not install it (no package mirror?): $(tail -1 /tmp/bare_root_mmdebstrap.log)"
fi

# The machine's apt sources: the deb822 file(s) of sources.list.d that apt reads, else sources.list.
SOURCES=$(ls /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
[ -n "$SOURCES" ] || SOURCES=/etc/apt/sources.list
[ -f "$SOURCES" ] || skip "no apt sources on this machine ($SOURCES)"

# ---- the base root (cached) ------------------------------------------------------------------
if ! [ -f "$CACHE" ] || ! tar -tf "$CACHE" ./usr/bin/make >/dev/null 2>&1; then
    rm -rf "$CACHE"
    say "making the base root: mmdebstrap --variant=minbase --include=make bookworm ($CACHE)"
    mkdir -p "$(dirname "$CACHE")"
    NEW=${CACHE%.tar}.new.tar # mmdebstrap picks the format from the name's ending
    rm -rf "$NEW"
    if ! mmdebstrap --variant=minbase --include=make bookworm "$NEW" "$SOURCES" \
            >/tmp/bare_root_base.log 2>&1; then
        rm -rf "$NEW"
        skip "mmdebstrap could not make a Debian 12 root (no package mirror reachable?): $(grep -m1 -E '^E:' /tmp/bare_root_base.log || tail -1 /tmp/bare_root_base.log)"
    fi
    mv "$NEW" "$CACHE"
fi

WORK=$(mktemp -d /var/tmp/llmtrain-bare-root.XXXXXX)
R=$WORK/root
mkdir -p "$R"
# What ran in the root: every process whose root is $R is ended; the mounts live in a private
# namespace and vanish with it; the root is removed (never across a file system boundary).
cleanup() {
    local pid n=0
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$R" ] && kill -9 "$pid" 2>/dev/null && n=$((n + 1))
    done
    [ $n -gt 0 ] && say "ended $n process(es) left in the root"
    if grep -q " $WORK/" /proc/self/mounts; then
        say "error: mounts under $WORK are visible outside the test's namespace: not removing it"
        return
    fi
    if [ "${BARE_ROOT_KEEP:-0}" = 1 ]; then say "kept: $R"; else rm -rf --one-file-system "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "unpacking the base root into $R"
tar -xf "$CACHE" -C "$R" || { echo "bare_root: cannot unpack $CACHE"; exit 1; }
# package access, as on a newly provisioned machine here
mkdir -p "$R/etc/apt/sources.list.d" "$R/etc/apt/apt.conf.d" "$R/usr/local/share/ca-certificates" "$R/etc/ssl/certs"
rm -f "$R/etc/apt/sources.list" "$R"/etc/apt/sources.list.d/*
[ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$R/etc/apt/"
cp -a /etc/apt/sources.list.d/. "$R/etc/apt/sources.list.d/"
for f in /etc/apt/apt.conf.d/*; do # the machine's own settings; Debian's files stay the root's
    [ -e "$R/etc/apt/apt.conf.d/$(basename "$f")" ] || cp -a "$f" "$R/etc/apt/apt.conf.d/"
done
[ -d /etc/apt/trusted.gpg.d ] && cp -a /etc/apt/trusted.gpg.d/. "$R/etc/apt/trusted.gpg.d/"
[ -d /etc/apt/keyrings ] && mkdir -p "$R/etc/apt/keyrings" && cp -a /etc/apt/keyrings/. "$R/etc/apt/keyrings/"
cp -a /usr/local/share/ca-certificates/. "$R/usr/local/share/ca-certificates/" 2>/dev/null
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/"
for f in /etc/pip.conf /etc/xdg/pip/pip.conf /root/.config/pip/pip.conf /root/.pip/pip.conf; do
    [ -f "$f" ] && mkdir -p "$R$(dirname "$f")" && cp "$f" "$R$f"
done
for f in /etc/hosts /etc/hostname /etc/resolv.conf; do [ -f "$f" ] && cp -L "$f" "$R$f"; done
# a chroot is not a booted machine: packages' services are not started in it
printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d" && chmod 755 "$R/usr/sbin/policy-rc.d"
say "base root: $(chroot "$R" dpkg-query -W -f='${binary:Package}\n' | wc -l) packages; gcc: $(chroot "$R" sh -c 'command -v gcc || echo none'), mpicc: $(chroot "$R" sh -c 'command -v mpicc || echo none')"

say "cloning $COMMIT of $SRC into the root (/root/llmtrain)"
git clone -q --no-hardlinks "$SRC" "$R/root/llmtrain" && git -C "$R/root/llmtrain" checkout -q "$COMMIT" ||
    { echo "bare_root: cannot clone $SRC at $COMMIT"; exit 1; }
say "commit $(git -C "$R/root/llmtrain" log -1 --format='%h %s' | cut -c1-90)"

# The environment inside: a login's, plus the machine's package-access variables (pip, CAs, proxy).
ENVV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb)
while IFS= read -r v; do ENVV+=("$v"); done < <(env | grep -E '^(PIP_[A-Z_]*|[A-Z_]*CA_BUNDLE|SSL_CERT_(FILE|DIR)|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)=' | grep -v '^PIP_FIND_LINKS=')

# inroot USER LOG SECONDS COMMAND: run COMMAND (sh -c) in /root/llmtrain inside the root as USER,
# in a private mount namespace; its output to LOG; returns its exit status (124 past SECONDS).
inroot() {
    local user=$1 log=$2 secs=$3 cmd=$4
    timeout -k 10 "$secs" unshare --mount --propagation private env R="$R" USR="$user" CMD="$cmd" sh -c '
        set -e
        mount -t proc proc "$R/proc"
        mount --bind /dev "$R/dev"
        mount --bind /dev/pts "$R/dev/pts"
        mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm"
        mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
        set +e
        chroot --userspec="$USR" "$R" "$@" sh -c "cd /root/llmtrain && $CMD"
        rc=$?
        umount "$R/tmp" "$R/dev/shm" "$R/dev/pts" "$R/dev" "$R/proc"
        exit $rc' sh env -i "${ENVV[@]}" >"$log" 2>&1
}

pass=0 fail=0
left() { local l=$((LIMIT - ($(date +%s) - START))); echo $((l > 30 ? l : 30)); } # seconds left, at least 30
result() { # name ok(0/1) detail
    if [ "$2" -eq 0 ]; then pass=$((pass + 1)); say "PASS $1: $3"; else fail=$((fail + 1)); say "FAIL $1: $3"; fi
}
LOGS=$SRC/build/bare-root
mkdir -p "$LOGS"

# 1. make before anything is installed: one line naming make deps
chmod 755 "$R/root"
inroot root:root "$LOGS/1-make.log" 120 "make"
rc=$?
lines=$(grep -c '\*\*\*' "$LOGS/1-make.log")
if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && grep -q "\*\*\*.*'make deps'" "$LOGS/1-make.log"; then
    result "make, nothing installed" 0 "$(grep '\*\*\*' "$LOGS/1-make.log" | cut -c1-160)"
else
    result "make, nothing installed" 1 "exit $rc, want a failure with one line naming 'make deps': $(tail -3 "$LOGS/1-make.log" | tr '\n' ' ' | cut -c1-300)"
fi

# 2. make deps without root: exit 2, the packages and the modules, nothing installed
before=$(chroot "$R" dpkg-query -W -f='${binary:Package}\n' | sort | md5sum)
inroot nobody:nogroup "$LOGS/2-deps-not-root.log" 120 "make deps"
rc=$?
after=$(chroot "$R" dpkg-query -W -f='${binary:Package}\n' | sort | md5sum)
if [ $rc -eq 2 ] && grep -q 'apt-get install -y.*libopenmpi-dev' "$LOGS/2-deps-not-root.log" &&
    grep -q 'module load' "$LOGS/2-deps-not-root.log" && [ "$before" = "$after" ]; then
    result "make deps, not root" 0 "exit 2, packages and modules listed, nothing installed"
else
    result "make deps, not root" 1 "exit $rc (want 2); packages listed: $(grep -c 'apt-get install' "$LOGS/2-deps-not-root.log"); installed set unchanged: $([ "$before" = "$after" ] && echo yes || echo no); $(tail -3 "$LOGS/2-deps-not-root.log" | tr '\n' ' ' | cut -c1-300)"
fi

# 3. make demo, end to end
t0=$(date +%s)
say "make demo (installs the dependencies, builds, trains 8 ranks; log $LOGS/3-demo.log)"
inroot root:root "$LOGS/3-demo.log" "$(left)" "make demo"
rc=$?
t3=$(($(date +%s) - t0))
skipped=$(grep -c 'spike: SKIPPED' "$LOGS/3-demo.log")
if [ $rc -eq 0 ] && grep -q '^step' "$LOGS/3-demo.log" && grep -q '^generate: text:' "$LOGS/3-demo.log" &&
    [ -s "$R/root/llmtrain/runs/demo/report.html" ] && [ "$skipped" -eq 0 ]; then
    result "make demo" 0 "${t3} s: $(grep '^step' "$LOGS/3-demo.log" | tail -1 | cut -c1-60); no step skipped by the spike detector; report.html written"
else
    result "make demo" 1 "exit $rc after ${t3} s, $skipped step(s) skipped by the spike detector on clean data: $(tail -5 "$LOGS/3-demo.log" | tr '\n' ' ' | cut -c1-400)"
fi

# 4. the first stage of make check: deps, build, unit tests
t0=$(date +%s)
say "make check-unit (log $LOGS/4-check-unit.log)"
inroot root:root "$LOGS/4-check-unit.log" "$(left)" "make check-unit"
rc=$?
t4=$(($(date +%s) - t0))
summary=$(tail -1 "$LOGS/4-check-unit.log")
if [ $rc -eq 0 ] && [[ $summary =~ ^[0-9]+\ passed,\ 0\ failed$ ]] && [ "${summary%% *}" -gt 0 ]; then
    result "make check-unit" 0 "${t4} s: $summary"
else
    result "make check-unit" 1 "exit $rc after ${t4} s: $(grep -E 'FAILED|failed|Error|\*\*\*' "$LOGS/4-check-unit.log" | tail -5 | tr '\n' ' ' | cut -c1-400)"
fi

say "total $(($(date +%s) - START)) s (limit $LIMIT s); logs in $LOGS"
echo "bare_root: $pass passed, $fail failed"
[ $fail -eq 0 ]
