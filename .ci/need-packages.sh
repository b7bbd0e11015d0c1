# Sourced (not run) by tests/run, pkg/build and .ci/run: installs Debian packages that are
# missing, through apt-get as root, or through sudo when not root.
#
#   need_packages PACKAGE WHY [PACKAGE WHY ...]
#       Installs each PACKAGE that dpkg does not have, printing "installing PACKAGE (WHY)" for
#       each, and nothing for the ones already there. Exits the script if it cannot.
#   package_exists PACKAGE
#       Whether apt can install PACKAGE at all (after one apt-get update).
#   can_install_packages
#       Whether this script can run apt-get as root at all (root, or sudo installed).
#
# apt-get update runs at most once per script run, and only when something is missing or
# looked up. apt-get's own output goes to a log that is shown only when it fails.

_apt_updated=no
_apt_said_sudo=no

# Makes sure apt-get can run as root before anything is installed: as root, or through sudo
# (saying so once, and asking for any password now); exits when neither works.
_apt_check_root() {
    [[ $EUID -eq 0 || $_apt_said_sudo == yes ]] && return 0
    if ! command -v sudo >/dev/null 2>&1; then
        echo "$0: needs the Debian packages $* but cannot install them: this is" \
            "$(id -un), not root, and sudo is not installed. Run it as root, or have root run:" \
            "apt-get install --no-install-recommends $*" >&2
        exit 1
    fi
    echo "not root ($(id -un)): apt-get runs through sudo"
    _apt_said_sudo=yes
    sudo -v || { echo "$0: sudo refused; install as root: apt-get install $*" >&2; exit 1; }
}

# Runs "$@" as root: as it is when root, through sudo otherwise (after _apt_check_root).
_apt_as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

# Runs apt-get with its output in a log, shown (the end of it) only when it fails.
_apt_get() {
    local log status=0
    log=$(mktemp)
    _apt_as_root env DEBIAN_FRONTEND=noninteractive apt-get "$@" >"$log" 2>&1 || status=$?
    if [[ $status -ne 0 ]]; then
        echo "$0: apt-get $* failed (exit $status):" >&2
        tail -n 20 "$log" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
}

_apt_update_once() {
    if [[ $_apt_updated == no ]]; then
        _apt_get update
        _apt_updated=yes
    fi
}

need_packages() {
    local missing=() whys=() i
    while (($#)); do
        if [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) != *" installed" ]]; then
            missing+=("$1")
            whys+=("$2")
        fi
        shift 2
    done
    ((${#missing[@]})) || return 0
    _apt_check_root "${missing[@]}"
    for i in "${!missing[@]}"; do
        echo "installing ${missing[i]} (${whys[i]})"
    done
    _apt_update_once
    _apt_get install -y --no-install-recommends "${missing[@]}"
}

can_install_packages() {
    [[ $EUID -eq 0 ]] || command -v sudo >/dev/null 2>&1
}

package_exists() {
    _apt_check_root "$1"
    _apt_update_once
    [[ -n $(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p' | grep -v '(none)') ]]
}
