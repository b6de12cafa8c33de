# Sourced by the test scripts: apt_install PACKAGE... installs Debian packages,
# waiting (at most VIRGA_APT_WAIT seconds, default 300) while another apt-get or
# dpkg holds the package manager's locks instead of failing at once.

# The locks apt-get update and apt-get install take (fcntl locks: flock(1)
# cannot see them, /proc/locks can). A test may point this elsewhere.
apt_locks=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)

# apt_lock_holder: prints the pid holding one of apt_locks and succeeds, or fails
# when none is held.
apt_lock_holder() {
  local f ino pid
  for f in "${apt_locks[@]}"; do
    [ -e "$f" ] || continue
    ino=$(stat -L -c %i "$f") || continue
    # /proc/locks: "1: POSIX ADVISORY WRITE PID MAJ:MIN:INODE START END".
    pid=$(awk -v ino="$ino" '$2 != "->" { split($6, id, ":"); if (id[3] == ino) { print $5; exit } }' /proc/locks)
    if [ -n "$pid" ]; then echo "$pid"; return 0; fi
  done
  return 1
}

# apt_wait: waits, bounded and saying so, until no other process holds apt's locks.
apt_wait() {
  local limit=${VIRGA_APT_WAIT:-300} waited=0 pid
  while pid=$(apt_lock_holder); do
    if [ "$waited" -ge "$limit" ]; then
      echo "another package manager (pid $pid: $(ps -o args= -p "$pid" 2>/dev/null || echo gone)) still holds the dpkg lock after ${limit}s; let it finish and run this again" >&2
      return 1
    fi
    if [ $((waited % 30)) = 0 ]; then
      echo "== waiting for pid $pid ($(ps -o comm= -p "$pid" 2>/dev/null || echo gone)) to release the dpkg lock (${waited}s of at most ${limit}s)" >&2
    fi
    sleep 1
    waited=$((waited + 1))
  done
}

# apt_install PACKAGE...: apt-get update and install, quietly, after apt_wait.
# DPkg::Lock::Timeout covers a package manager that starts between the wait
# and apt-get's own locking.
apt_install() {
  apt_wait || return 1
  local o=(-o "DPkg::Lock::Timeout=${VIRGA_APT_WAIT:-300}")
  DEBIAN_FRONTEND=noninteractive apt-get "${o[@]}" update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive apt-get "${o[@]}" install -y -qq "$@" >/dev/null
}
