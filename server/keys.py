"""python -m server.keys add|list|remove|usage: manage the key store (server.key_store) of a server.

    python -m server.keys add --name alice --rate-limit-per-minute 60 --character-quota 500000
    python -m server.keys list
    python -m server.keys usage alice
    python -m server.keys remove alice

The store is the server's (`--key-store`, else SERVER_KEY_STORE, else keys.sqlite in the working directory). `add`
prints the new key once: only its hash is kept. A limit left out is the server's default; 0 is no limit. A running
server sees an added or removed key within seconds.
"""

from __future__ import annotations

import argparse
import sys

from .key_store import KeyStore
from .sqlite_file import StoreError
from .settings import Settings


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m server.keys", description="Manage the server's API keys.")
    p.add_argument("--key-store", help=f"the store file (env {Settings.env_name('key_store')}; default "
                                       f"{Settings.key_store})")
    commands = p.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="make a key and print it (once)")
    add.add_argument("--name", required=True)
    add.add_argument("--rate-limit-per-minute", type=int, help="this key's requests per minute (0: none)")
    add.add_argument("--character-quota", type=int, help="this key's characters in all (0: none)")
    commands.add_parser("list", help="the keys: name, first characters, limits, usage")
    for name, what in (("remove", "delete the keys of this name (or first characters)"),
                       ("usage", "characters and requests of the keys of this name (or first characters)")):
        commands.add_parser(name, help=what).add_argument("name")
    return p.parse_args(argv)


def limit(value: int | None) -> str:
    return "default" if value is None else str(value or "none")


def row(store: KeyStore, record) -> str:
    characters, requests = store.usage(record.id)
    return (f"{record.name}\t{record.hint}…\trate_limit_per_minute={limit(record.rate_limit_per_minute)}\t"
            f"character_quota={limit(record.character_quota)}\tcharacters={characters}\trequests={requests}"
            + ("" if record.active else "\t(inactive: no longer in SERVER_API_KEYS)"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        store = KeyStore(args.key_store or Settings.from_env().key_store)
    except (StoreError, ValueError) as e:
        print(f"python -m server.keys: {e}", file=sys.stderr)
        return 1
    if args.command == "add":
        print(store.add(args.name, rate_limit_per_minute=args.rate_limit_per_minute,
                        character_quota=args.character_quota))
        return 0
    if args.command == "remove":
        removed = store.remove(args.name)
        print(f"removed {removed} key(s)")
        return 0 if removed else 1
    records = [r for r in store.keys() if args.command == "list" or args.name in (r.name, r.hint)]
    for record in records:
        print(row(store, record))
    return 0 if records or args.command == "list" else 1


if __name__ == "__main__":
    sys.exit(main())
