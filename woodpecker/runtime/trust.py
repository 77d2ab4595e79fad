"""Who a plan is trusted from. A plan with generated kernels is a program: loading it maps
native code into the process (as installing a wheel does), so where it came from matters.

Contract (issue 76, the trust model; docs/guide.md "Security: a plan is code"):
- Every plan this user's Woodpecker saves is signed: plan.json's last field, `signature`,
  holds an HMAC-SHA256 of the rest of plan.json (the document without it, serialised as
  `save_plan` writes it) under this user's plan key (32 random bytes made on first use, mode
  0600, at `$WOODPECKER_PLAN_KEY` or `<user config dir>/woodpecker/plan.key`), and the key's
  id (a sha256 prefix of the key, so a refusal can say which key signed it). plan.json
  records every other file's sha256, so the signature covers the whole plan; inside plan.json
  it cannot be torn from it by two saves racing.
- A plan holding native code (an engine with `caps.generated`: Halide kernels) loads only
  when (a) the caller pins it by its digest (`load(..., digest=)`, `--digest`), or (b) its
  signature verifies under this user's key (a plan this user built, unedited), or (c) the
  caller says it trusts it (`trust=True`, `--trust`). Anything else — a plan from another
  machine or user, or one edited after it was saved, even consistently (a kernel and its
  sha256 in plan.json replaced together) — is one PlanError line saying how to trust it.
- A plan without native code (a library session's ONNX models, numpy steps) loads without a
  signature: its files are data that the libraries parse, checked by sha256 as every plan's.

Why a MAC and not a public-key signature: the question a load asks is "did I build this?";
a secret only this user's account can read answers it with the standard library alone. A
plan to be shared across machines is pinned by its digest, which the builder hands over
with it (as a wheel's hash in a lock file).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from woodpecker.errors import PlanError

SIGNATURE_FIELD = "signature"
KEY_ENV = "WOODPECKER_PLAN_KEY"


def key_path() -> Path:
    env = os.environ.get(KEY_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_config_dir("woodpecker")) / "plan.key"


def _key(create: bool) -> bytes | None:
    """This user's plan key (made when missing and `create`); None when there is none."""
    path = key_path()
    try:
        data = path.read_bytes()
        if len(data) >= 32:
            return data
    except FileNotFoundError:
        pass
    except OSError:
        return None
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = secrets.token_bytes(32)
    try:   # exclusive: two processes making the key at once keep the first one's
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(fd, "wb") as f:
        f.write(fresh)
    return fresh


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"woodpecker plan key\0" + key).hexdigest()[:16]


def unsigned_bytes(doc: dict) -> bytes:
    """What the signature covers: plan.json's document without its signature, serialised as
    save_plan writes it (JSON round-trips Python's ints, floats and strings exactly)."""
    return json.dumps({k: v for k, v in doc.items() if k != SIGNATURE_FIELD},
                      indent=1).encode()


def signature(unsigned: bytes) -> dict:
    """plan.json's `signature` for a document serialised as `unsigned`, under this user's key
    (made on first use)."""
    key = _key(create=True)
    if key is None:
        raise PlanError(f"cannot read or make the plan key {key_path()}")
    return {"key": key_id(key), "hmac_sha256": hmac.new(key, unsigned, hashlib.sha256)
            .hexdigest()}


def signed_here(doc: dict) -> tuple[bool, str]:
    """(whether plan.json's document `doc` carries this user's signature of itself, why not in
    a few words)."""
    sig = doc.get(SIGNATURE_FIELD)
    if sig is None:
        return False, "it carries no signature"
    try:
        signer, mac = str(sig["key"]), str(sig["hmac_sha256"])
    except (KeyError, TypeError):
        return False, "its signature is corrupt"
    key = _key(create=False)
    if key is None or signer != key_id(key):
        return False, f"it was signed by another key ({signer}), not this machine's"
    want = hmac.new(key, unsigned_bytes(doc), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        return False, "plan.json was changed after it was signed"
    return True, ""


def wanted_digest(digest: object) -> str:
    """`digest` as "sha256:<64 lowercase hex digits>" (the prefix optional, case free); a
    PlanError line for anything else."""
    if not isinstance(digest, str) or not digest.strip():
        raise PlanError(f"digest {digest!r} is not a plan digest (compile and save print one: "
                        "sha256:<64 hex digits>)")
    want = digest.strip().lower()
    want = want if want.startswith("sha256:") else "sha256:" + want
    hexpart = want[len("sha256:"):]
    if len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise PlanError(f"digest {digest!r} is not a plan digest (sha256:<64 hex digits>)")
    return want
