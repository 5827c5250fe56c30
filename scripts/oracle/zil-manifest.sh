#!/bin/bash
# zil-manifest.sh DIR [PREFIX] — a diffable listing of one mounted file system,
# used to compare the ZIL fixtures' file systems as OpenZFS sees them (frozen,
# after its own replay) with what ozfs makes of them.  Runs in the ozvm guest
# (make-zil.sh, replay-check.sh) and on the host alike: Debian tools only
# (find, sort, xargs, stat, sha256sum, getfattr, readlink).
#
#   zil-manifest.sh /zlfs/a zl/a      > a.manifest
#   ZIL_MANIFEST_MTIME=1 zil-manifest.sh /mnt/x zl/a    (adds mtime=SEC.NSEC)
#
# One line per path, sorted bytewise (LC_ALL=C) by path; PREFIX (default:
# DIR) stands for DIR itself, entries are PREFIX/relative/path:
#
#   PATH TYPE MODE UID GID SIZE NLINK [sha256=HEX] [rdev=MAJ:MIN] [-> TARGET] [mtime=S.NS]
#
# TYPE is one of f d l c b p s, MODE the octal permission bits with
# setuid/setgid/sticky (stat %a, zero-padded to 4 digits), sha256 for regular
# files, rdev (hex major:minor, as stat %t:%T prints them) for device nodes,
# the target for symlinks.  Each path's extended attributes follow its line,
# one line each, sorted by name, values hex-encoded (getfattr -e hex; an
# empty value prints as NAME=):
#
#   PATH xattr NAME=0xHEX
#
# getfattr -d -m - lists every namespace the caller may read: user.*, and as
# root trusted.* and security.*, system.posix_acl_*.  The walk stays on DIR's
# file system: entries on another device (nested mounts) are left out.  Times
# are not listed unless ZIL_MANIFEST_MTIME=1 (replay does not preserve every
# directory's times).  File names must not contain newlines.
set -euo pipefail
export LC_ALL=C
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 DIR [PREFIX]" >&2; exit 2; }
dir=${1%/}; [ -n "$dir" ] || dir=/
prefix=${2:-$dir}
command -v getfattr >/dev/null || { echo "zil-manifest: getfattr missing (apt-get install attr)" >&2; exit 2; }
cd "$dir"
topdev=$(stat -c %d .)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Few processes, not a few per path (this runs in a TCG-emulated guest too).
find . -xdev -print0 | sort -z > "$tmp/list"
xargs -0 -r stat --printf '%d %f %a %u %g %s %h %t %T %.9Y %n\n' -- < "$tmp/list" > "$tmp/stat"
declare -A sum xat
while IFS= read -r -d '' l; do          # sha256sum -z: "HEX  NAME\0", NAME unescaped
    sum[${l#*  }]=${l%%  *}
done < <(find . -xdev -type f -print0 | xargs -0 -r sha256sum -z --)
cur=
while IFS= read -r l; do                # getfattr: "# file: NAME", NAME=VALUE..., ""
    case $l in
        "# file: "*) cur=${l#\# file: } ;;
        "") ;;
        *) xat[$cur]+="$l"$'\n' ;;
    esac
done < <(xargs -0 -r getfattr -h -d -m - -e hex --absolute-names -- < "$tmp/list" 2>/dev/null || true)

while read -r dev ty mode uid gid size nlink maj min mtime p; do
    [ "$dev" = "$topdev" ] || continue
    case $(( 0x$ty & 0170000 )) in
        $((0100000))) t=f ;; $((0040000))) t=d ;; $((0120000))) t=l ;;
        $((0020000))) t=c ;; $((0060000))) t=b ;; $((0010000))) t=p ;;
        $((0140000))) t=s ;; *) t=? ;;
    esac
    if [ "$p" = . ]; then name=$prefix; else name=$prefix/${p#./}; fi
    line="$name $t $(printf '%04d' "$mode") $uid $gid $size $nlink"
    case $t in
        f) line+=" sha256=${sum[$p]:-?}" ;;
        c|b) line+=" rdev=$maj:$min" ;;
        l) line+=" -> $(readlink -- "$p")" ;;
    esac
    [ "${ZIL_MANIFEST_MTIME:-0}" = 1 ] && line+=" mtime=$mtime"
    printf '%s\n' "$line"
    if [ -n "${xat[$p]:-}" ]; then
        printf '%s' "${xat[$p]}" | sort | while IFS= read -r x; do printf '%s xattr %s\n' "$name" "$x"; done
    fi
done < "$tmp/stat"
