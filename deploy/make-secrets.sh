#!/bin/sh
# Writes the secret files docker-compose.yml and docker-compose.replicas.yml mount, into
# ./secrets/ (or the directory given as the first argument), once: an existing file is kept.
#
#   postgres_password    PostgreSQL's password (POSTGRES_PASSWORD_FILE)
#   database_url         the gateway's store URL, with that password (RESPGATE_DATABASE_URL_FILE)
#   respgate_auth_keys   the gateway's API keys: one key of tenant "default", stored as its
#                        SHA-256, so the file holds no key (RESPGATE_AUTH__KEYS_FILE)
#   compaction_key       the key that signs compaction items (RESPGATE_COMPACTION_KEY_FILE)
#   metrics_token        the bearer token of GET /metrics (RESPGATE_METRICS__TOKEN_FILE), which
#                        Prometheus sends (docker compose --profile observability)
#   grafana_admin_password  Grafana's admin password (the observability profile)
#
# The API key itself is printed once, here, and kept nowhere: note it down. The directory is
# yours alone (mode 700); the files in it are readable by the containers' users (mode 644:
# compose mounts them as they are, and the gateway runs as uid 10001, PostgreSQL as uid 999).
set -eu

dir=${1:-secrets}
umask 077
mkdir -p "$dir"
chmod 700 "$dir"

random_hex() {
    # 32 random bytes as 64 hex digits.
    od -An -N32 -tx1 /dev/urandom | tr -d ' \n'
}

sha256() {
    if command -v sha256sum >/dev/null 2>&1; then
        printf %s "$1" | sha256sum | cut -d' ' -f1
    else
        printf %s "$1" | shasum -a 256 | cut -d' ' -f1
    fi
}

write() {
    # write NAME CONTENTS: the file, unless it exists.
    if [ -e "$dir/$1" ]; then
        echo "kept    $dir/$1"
        return 1
    fi
    printf '%s\n' "$2" > "$dir/$1"
    chmod 644 "$dir/$1"
    echo "wrote   $dir/$1"
}

password=$(random_hex)
if write postgres_password "$password"; then
    write database_url "postgresql+asyncpg://respgate:$password@postgres:5432/respgate" || true
else
    [ -e "$dir/database_url" ] || {
        echo "$dir/postgres_password exists but $dir/database_url does not: remove both, or write" >&2
        echo "database_url as postgresql+asyncpg://respgate:<that password>@postgres:5432/respgate" >&2
        exit 1
    }
    echo "kept    $dir/database_url"
fi

key="sk-respgate-$(random_hex)"
if write respgate_auth_keys "[{\"tenant\": \"default\", \"name\": \"compose\", \"key_sha256\": \"$(sha256 "$key")\"}]"; then
    echo
    echo "The gateway's API key (shown once; the file holds only its SHA-256):"
    echo
    echo "    $key"
    echo
    echo "    curl -H \"Authorization: Bearer $key\" http://127.0.0.1:9000/v1/models"
    echo
fi

write compaction_key "$(random_hex)" || true
write metrics_token "$(random_hex)" || true
write grafana_admin_password "$(random_hex)" || true
