#!/bin/bash
# Guest job for ../shared/oracle/vm/openzfs-vm.sh: OpenZFS 2.3.2 makes the
# incremental raw stream crates/cli/tests/fixtures/gcm-inc-openzfs-2.3.zstream.gz
# holds — `zfs send -w -i @s1` of the corpus pool c7-crypt's gcm after
# OpenZFS changed it with its key (files in, a file out, a file appended, an
# xattr) — and the sha256 of every file of the new snapshot:
#
#   gunzip -c ../shared/corpus/openzfs-2.3/c7-crypt/d0.img.gz > d0.img
#   mkdir -p share/c7-crypt && cp -r ../shared/corpus/openzfs-2.3/c7-crypt/keys share/c7-crypt/
#   ../shared/oracle/vm/openzfs-vm.sh run scripts/oracle/make-raw-incremental.sh \
#       --disk d0.img --share share
#   gzip -9 -c share/gcm-inc.zstream > crates/cli/tests/fixtures/gcm-inc-openzfs-2.3.zstream.gz
#   cp share/gcm-s3.sha256 crates/cli/tests/fixtures/gcm-inc-openzfs-2.3.sha256
set -uo pipefail
W=/var/tmp/vp; mkdir -p $W
dd if=/dev/vdb of=$W/d0.img bs=1M conv=sparse status=none
zpool import -d $W -N c7-crypt || exit 1
zfs load-key -L file:///share/c7-crypt/keys/secret.pass c7-crypt/gcm || exit 1
zfs set atime=off c7-crypt/gcm
zfs mount c7-crypt/gcm || exit 1
M=$(zfs get -H -o value mountpoint c7-crypt/gcm)
head -c 40000 /dev/urandom > $M/oz-new.bin
mkdir -p $M/oz-dir; for i in $(seq 1 40); do echo "file $i" > $M/oz-dir/f$i; done
rm -f $M/text.txt $M/deep/a/b/c/d/e/f/g/leaf.txt
echo appended >> $M/small-random.bin
setfattr -n user.oz -v fromvm $M/oz-new.bin
zfs snapshot c7-crypt/gcm@s3 || exit 1
zfs send -w -i @s1 c7-crypt/gcm@s3 > /share/gcm-inc.zstream || exit 1
(cd $M/.zfs/snapshot/s3 && find . -type f | sort | xargs sha256sum) > /share/gcm-s3.sha256
zfs unmount -a; zpool export c7-crypt
ls -la /share/gcm-inc.zstream; wc -l /share/gcm-s3.sha256
echo "### done"
