# What the tests need besides Rust, made ready: sourced by `scripts/test`
# (the README's test command) and `.ci/run`.
#
# `ensure_services` makes sure Redis answers at REDIS_URL and PostgreSQL at
# DATABASE_URL (by default the local servers on 127.0.0.1:6379 and :5432),
# starting them, and installing them with apt-get where the machine allows
# (root, or sudo without a password), and that nginx is installed (the tests
# start their own, as a rate-limiting upstream on loopback). It exports both
# variables. A service that cannot be made ready is reported; the caller
# decides whether that is fatal (`services_missing` lists them).

export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export DEBIAN_FRONTEND=noninteractive

services_missing=()

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }

# Runs a command as root: directly, or through sudo when there is one.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        warn "not root and no sudo: cannot run '$*'"
        return 1
    fi
}

# Waits up to 20 s for a command to succeed.
wait_for() {
    local attempt
    for attempt in $(seq 1 40); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.5
    done
    return 1
}

apt_updated=false
apt_install() {
    command -v apt-get >/dev/null 2>&1 || {
        warn "no apt-get to install $*"
        return 1
    }
    if [ "$apt_updated" = false ]; then
        as_root apt-get update || return 1
        apt_updated=true
    fi
    as_root apt-get install -y "$@"
}

redis_up() { [ "$(redis-cli -u "$REDIS_URL" ping 2>/dev/null)" = PONG ]; }

start_redis() {
    if command -v redis-cli >/dev/null 2>&1 && redis_up; then
        info "Redis answers at $REDIS_URL"
        return 0
    fi
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        info "installing Redis"
        apt_install redis-server || return 1
    fi
    redis_up && return 0
    info "starting Redis on 127.0.0.1:6379"
    as_root mkdir -p /var/lib/redis /var/log/redis || return 1
    as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
        --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log || return 1
    wait_for redis_up
}

postgres_up() { pg_isready -q -d "$DATABASE_URL"; }

start_postgres() {
    if command -v pg_isready >/dev/null 2>&1 && postgres_up; then
        info "PostgreSQL answers at $DATABASE_URL"
    else
        if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! command -v pg_isready >/dev/null 2>&1 ||
            [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
            info "installing PostgreSQL"
            apt_install postgresql || return 1
        fi
        local version
        version="$(ls /etc/postgresql | sort -V | tail -n 1)"
        info "starting PostgreSQL $version"
        as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || return 1
        wait_for postgres_up || return 1
    fi
    prepare_database
}

# Makes DATABASE_URL usable: the `test` database exists and the `postgres`
# user may connect over TCP from 127.0.0.1 without a password.
prepare_database() {
    command -v psql >/dev/null 2>&1 || return 0
    if psql "$DATABASE_URL" -XAtqc 'select 1' >/dev/null 2>&1; then
        info "DATABASE_URL connects"
        return 0
    fi
    info "preparing the test database"
    local version hba
    version="$(ls /etc/postgresql | sort -V | tail -n 1)"
    hba="/etc/postgresql/$version/main/pg_hba.conf"
    if [ -f "$hba" ] && ! grep -Eq '^host[[:space:]]+all[[:space:]]+postgres[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
        # First matching line wins: trust the postgres user on loopback only.
        as_root sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba" || return 1
        as_root pg_ctlcluster --skip-systemctl-redirect "$version" main reload || return 1
    fi
    local exists
    exists="$(as_root runuser -u postgres -- psql -XAtqc "select 1 from pg_database where datname = 'test'")" ||
        return 1
    if [ "$exists" != 1 ]; then
        as_root runuser -u postgres -- createdb test || return 1
    fi
    psql "$DATABASE_URL" -XAtqc 'select 1' >/dev/null 2>&1
}

nginx_installed() {
    [ -x /usr/sbin/nginx ] || [ -x /usr/local/sbin/nginx ] || command -v nginx >/dev/null 2>&1
}

ensure_nginx() {
    if nginx_installed; then
        info "nginx is installed"
        return 0
    fi
    info "installing nginx-light"
    apt_install nginx-light
}

ensure_services() {
    step "Redis ($REDIS_URL)"
    start_redis || services_missing+=("Redis at $REDIS_URL (REDIS_URL)")
    step "PostgreSQL ($DATABASE_URL)"
    start_postgres || services_missing+=("PostgreSQL at $DATABASE_URL (DATABASE_URL)")
    step "nginx (the tests' rate-limiting upstream)"
    ensure_nginx || services_missing+=("nginx (apt-get install nginx-light)")
    return 0
}
