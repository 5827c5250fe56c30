# workload.py MOUNT MODE [MOUNT MODE]...   MODE: fsync (each group ends
# with fsync/fdatasync of what it touched) or nosync (sync=always: none).
import os, random, stat, sys

def data(seed, n):
    return random.Random(seed).randbytes(n)

def put(path, b, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, b)
    finally:
        os.close(fd)

def pwrite(path, off, b, flags=0):
    fd = os.open(path, os.O_WRONLY | flags)
    try:
        os.pwrite(fd, b, off) if not flags & os.O_APPEND else os.write(fd, b)
    finally:
        os.close(fd)

def run(root, mode):
    sync = mode == "fsync"
    def fs(*paths, data_only=False):
        if not sync:
            return
        for p in paths:
            fd = os.open(os.path.join(root, p), os.O_RDONLY)
            try:
                (os.fdatasync if data_only else os.fsync)(fd)
            finally:
                os.close(fd)
    J = lambda *p: os.path.join(root, *p)
    tag = os.path.basename(root)
    # 1. files of several sizes
    put(J("one"), b"1")
    put(J("five"), data(tag + "five", 5000))
    put(J("big"), data(tag + "big", 200000))
    put(J("big2"), data(tag + "big2", 200000))
    put(J("grow"), data(tag + "grow", 5000))
    put(J("empty"), b"")
    put(J("victim"), b"to be replaced by a rename\n")
    put(J("doomed"), data(tag + "doomed", 3000))
    fs("one", "five", "big", "big2", "grow", "empty", "victim", "doomed", ".")
    # 2. directories, nested
    os.mkdir(J("d1"))
    os.makedirs(J("d1", "d2", "d3"))
    os.mkdir(J("gone.dir"))
    os.mkdir(J("mv.dir"))
    put(J("d1", "d2", "d3", "deep"), data(tag + "deep", 12345))
    put(J("mv.dir", "inner"), b"inside a directory that moves\n")
    fs("d1/d2/d3/deep", "mv.dir/inner", "d1/d2/d3", "d1/d2", "d1", "gone.dir", "mv.dir", ".")
    # 3. symlinks and hard links
    os.symlink("five", J("ln.five"))
    os.symlink("../../one", J("d1", "d2", "ln.up"))
    os.symlink("no/such/target", J("ln.dangling"))
    os.symlink("x" * 200, J("ln.long"))
    os.link(J("big"), J("d1", "big.hl"))
    os.link(J("one"), J("one.hl"))
    fs("d1/d2", "d1", ".")
    # 4. renames: within a dir, across dirs, a directory, replacing a file
    os.rename(J("five"), J("five.renamed"))
    os.rename(J("one"), J("d1", "d2", "one.moved"))
    os.rename(J("mv.dir"), J("d1", "mv.dir.moved"))
    put(J("d1", "src"), data(tag + "src", 777))
    fs("d1/src")
    os.rename(J("d1", "src"), J("victim"))
    fs("d1/d2", "d1", ".")
    # 5. unlink, rmdir
    os.unlink(J("doomed"))
    os.unlink(J("one.hl"))
    os.rmdir(J("gone.dir"))
    fs(".")
    # 6. overwrite in the middle, append, a write far past the end
    pwrite(J("big"), 16380, data(tag + "mid1", 3000))      # across a 16k boundary
    pwrite(J("big"), 131000, data(tag + "mid2", 2000))     # across the 128k boundary
    pwrite(J("five.renamed"), 0, data(tag + "app", 1234), os.O_APPEND)
    pwrite(J("d1", "d2", "d3", "deep"), 1 << 20, b"after a hole\n")
    fs("big", "five.renamed", data_only=True)
    fs("d1/d2/d3/deep")
    # 7. truncate: shrink, grow
    os.truncate(J("big2"), 50001)
    os.truncate(J("grow"), 300000)
    os.truncate(J("empty"), 7)
    fs("big2", "grow", "empty")
    # 8. chmod, chown, utime
    os.chmod(J("five.renamed"), 0o640)
    os.chmod(J("grow"), 0o4755)
    os.chmod(J("d1", "d2"), 0o1777)
    os.chown(J("big2"), 1234, 5678)
    os.chown(J("d1", "d2", "d3"), 4321, 8765)
    os.chown(J("ln.five"), 2222, 3333, follow_symlinks=False)
    os.utime(J("victim"), ns=(1_000_000_000_123_456_789, 1_500_000_000_987_654_321))
    fs("five.renamed", "grow", "d1/d2", "big2", "d1/d2/d3", "victim", ".")
    # 9. special files
    os.mkfifo(J("fifo"), 0o600)
    os.mknod(J("d1", "chr"), 0o620 | stat.S_IFCHR, os.makedev(1, 3))
    fs("d1", ".")
    # 10. a last mixed group: a file made, renamed over a hard link, chmod'ed
    put(J("last"), data(tag + "last", 40000))
    os.link(J("last"), J("d1", "last.hl"))
    os.rename(J("last"), J("d1", "big.hl"))   # replaces a link of big
    os.chmod(J("d1", "big.hl"), 0o600)
    fs("d1/big.hl", "d1", ".")

args = sys.argv[1:]
for i in range(0, len(args), 2):
    run(args[i], args[i + 1])
