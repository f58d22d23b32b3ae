#!/usr/bin/env bash
# Prints a directory to use as PATH that holds only the programs a fresh
# Debian 12 machine has after `scripts/deps.sh build`: those of the base
# system (packages of priority required or important) and of the packages
# deps.sh installs for building and testing, with everything they depend on.
# Whatever else this machine has -- Open MPI from `deps.sh bench`, a package
# someone installed by hand, pyenv, cargo, the CUDA toolkit -- is not in it.
#
# CI runs `make test` with this PATH, so a test that needs a program that
# deps.sh does not install fails there even on a machine that has it.
# Usage: PATH=$(scripts/fresh_path.sh [DIR]) make test   (DIR: where to build
# the directory of links; default a new one under /tmp)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$(mktemp -d /tmp/braid-fresh-path.XXXXXX)}
mkdir -p "$dir"
find "$dir" -maxdepth 1 -type l -delete

mapfile -t wanted < <("$here/deps.sh" --list build)
# Installed packages of the base system.
mapfile -t base < <(dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Priority}\n' |
                    awk '$1 == "ii" && ($3 == "required" || $3 == "important") {print $2}')
# Everything the wanted packages need, without recommends or suggests (deps.sh
# installs with --no-install-recommends); virtual names are dropped.
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                         --no-breaks --no-replaces --no-enhances "${wanted[@]}" 2>/dev/null |
                       awk '/^[^ <]/ {print $1}' | sort -u)
allowed=$(printf '%s\n' "${wanted[@]}" "${base[@]}" "${closure[@]}" | sed 's/:.*//' | sort -u)
installed=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" {print $2}' | sed 's/:.*//' | sort -u)
mapfile -t pkgs < <(comm -12 <(echo "$allowed") <(echo "$installed"))

declare -A ok
for p in "${pkgs[@]}"; do ok[$p]=1; done
link() {  # PATH: the first program of a name wins, as on PATH
  local name=${1##*/}
  [[ -e $dir/$name || -L $dir/$name ]] || ln -s "$1" "$dir/$name"
}
# Files the allowed packages own in the program directories.
dpkg -L "${pkgs[@]}" 2>/dev/null | grep -E '^/(usr/)?s?bin/[^/]+$' | sort -u | while read -r f; do
  [[ -x $f && ! -d $f ]] && link "$f"
done
# Programs reached through /etc/alternatives (c++, python links, mpirun, ...):
# dpkg -L does not list the link, so keep it when its final target is owned by
# an allowed package (one dpkg -S for all of them).
declare -A via  # final target -> the links to it
for f in /usr/bin/* /usr/sbin/*; do
  [[ -L $f && $(readlink "$f") == /etc/alternatives/* ]] || continue
  t=$(readlink -f "$f") && via[$t]+="$f "
done
if ((${#via[@]})); then
  while IFS= read -r line; do  # "pkg[:arch][, pkg2]: /path"
    owner=${line%%[:,]*} path=${line##*: }
    [[ -n ${ok[$owner]:-} && -n ${via[$path]:-} ]] || continue
    for f in ${via[$path]}; do link "$f"; done
  done < <(dpkg -S "${!via[@]}" 2>/dev/null)
fi
echo "$dir"
