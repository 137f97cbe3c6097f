"""Event signatures: the RFC 0008 known-answer vector, and what the signature covers."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mempalace_logstream.identity import keys, signing
from mempalace_logstream.identity.keys import KeyPair
from mempalace_logstream.models import Event

RFC = Path(__file__).resolve().parents[1] / "rfcs" / "0008-identity.md"
SEED = bytes(range(32))
REP = "rep_" + "0" * 32
KAT_SIGNATURE = (
    "64ii7iO9yL4arLMTCHxf4We_VYZIQLzf7Upal92W4eolAQSq8VojQC4TUSerGpLWaiA2VNceV8bbq0c6gpZZCw"
)
SHAS = {"art_1": hashlib.sha256(b"one").hexdigest(), "art_2": hashlib.sha256(b"two").hexdigest()}


def kat_event(**changes: object) -> Event:
    event = Event(
        id="evt_20261202T000000_00000000000000000001",
        seq=7,
        origin_replica=REP,
        origin_seq=1,
        hlc="1764633600000-000000-" + REP,
        type="note",
        stream="project/demo",
        room="general",
        topic=None,
        from_agent="alice",
        to_agent="bob",
        correlation_id=None,
        branch=None,
        base_commit=None,
        status=None,
        artifact_ids=("art_2", "art_1"),
        body="hello\n",
        created_at="2026-12-02T00:00:00.000Z",
        metadata_json=json.dumps({"b": [1, 2.5, "x"], "a": "é"}, ensure_ascii=False),
    )
    return replace(event, **changes)  # type: ignore[arg-type]


def verifies(pair: KeyPair, sig: str, event: Event, shas=SHAS, body_sha=None) -> bool:
    body = body_sha or signing.body_sha256(event.body)
    return signing.verify(pair.public, sig, signing.event_fields(event), body, shas)


def _rfc_block(after: str) -> str:
    text = RFC.read_text(encoding="utf-8").split("## Vector", 1)[1]
    return text.split(after, 1)[1].split("```", 2)[1].strip()


def test_the_known_answer_vector_signs_to_the_fixed_signature():
    pair = KeyPair.from_seed(SEED)
    assert pair.key_id == "ed25519:56475aa75463474c0285df5dbf2bcab7"
    assert signing.sign_event(pair, kat_event(), SHAS) == KAT_SIGNATURE
    assert verifies(pair, KAT_SIGNATURE, kat_event())


def test_the_rfc_spells_out_the_same_canonical_bytes_and_signature():
    payload = signing.signing_payload(
        signing.event_fields(kat_event()), signing.body_sha256("hello\n"), SHAS
    )
    assert "".join(_rfc_block("reading:").split("\n")).encode("utf-8") == payload
    assert _rfc_block("no padding):") == KAT_SIGNATURE
    rfc = RFC.read_text(encoding="utf-8")
    assert f"one line, {len(payload)} bytes" in rfc
    assert KeyPair.from_seed(SEED).public.to_text() in rfc
    assert KeyPair.from_seed(SEED).key_id in rfc


def test_the_payload_carries_the_domain_tag_and_no_body_or_seq():
    payload = json.loads(signing.signing_payload(signing.event_fields(kat_event()), "0" * 64, SHAS))
    assert payload["domain"] == "mempalace-logstream/event-signature/v1"
    assert "body" not in payload and "seq" not in payload and "artifact_ids" not in payload
    assert set(payload) == set(signing.SIGNED_FIELDS) - {"artifact_ids"} | {
        "domain",
        "body_sha256",
        "artifacts",
    }


def test_the_signed_fields_are_the_content_key_fields():
    event = kat_event()
    key = event.content_key()
    fields = signing.event_fields(event)
    names = [n for n in signing.SIGNED_FIELDS if n != "artifact_ids"]
    assert [fields[n] for n in names] == [
        v for v, n in zip(key, _CONTENT_KEY_NAMES, strict=True) if n in names
    ]


_CONTENT_KEY_NAMES = (
    "id origin_replica origin_seq hlc type stream room topic from_agent to_agent "
    "correlation_id branch base_commit status artifact_ids body created_at metadata"
).split()


def test_seq_is_local_and_not_signed():
    pair = KeyPair.from_seed(SEED)
    assert verifies(pair, KAT_SIGNATURE, kat_event(seq=999))


def test_a_redacted_body_verifies_through_its_stored_sha256():
    pair = KeyPair.from_seed(SEED)
    redacted = kat_event(body="[redacted]")
    assert not verifies(pair, KAT_SIGNATURE, redacted)
    assert verifies(pair, KAT_SIGNATURE, redacted, body_sha=signing.body_sha256("hello\n"))


def test_artifact_order_does_not_matter_but_duplicates_do():
    pair = KeyPair.from_seed(SEED)
    assert verifies(pair, KAT_SIGNATURE, kat_event(artifact_ids=("art_1", "art_2")))
    assert not verifies(pair, KAT_SIGNATURE, kat_event(artifact_ids=("art_1", "art_2", "art_2")))


def test_metadata_key_order_and_whitespace_do_not_matter():
    pair = KeyPair.from_seed(SEED)
    text = '{ "a" : "\\u00e9",\n  "b" : [1, 2.50, "x"] }'
    assert verifies(pair, KAT_SIGNATURE, kat_event(metadata_json=text))


def test_an_unencodable_event_cannot_be_signed_and_never_verifies():
    pair = KeyPair.from_seed(SEED)
    big = kat_event(metadata_json='{"n": 9007199254740993}')
    with pytest.raises(signing.SigningError, match="not exactly a double"):
        signing.sign_event(pair, big, SHAS)
    assert not verifies(pair, KAT_SIGNATURE, big)
    with pytest.raises(signing.SigningError, match="unknown SHA-256 for artifacts: art_1"):
        signing.sign_event(pair, kat_event(), {"art_2": SHAS["art_2"]})
    without_hlc = {k: v for k, v in signing.event_fields(kat_event()).items() if k != "hlc"}
    with pytest.raises(signing.SigningError, match="missing signed fields: hlc"):
        signing.signing_payload(without_hlc, "0" * 64, SHAS)


def test_unreadable_stored_metadata_is_never_signed_as_its_empty_stand_in():
    pair = KeyPair.from_seed(SEED)
    signed_empty = signing.sign_event(pair, kat_event(metadata_json="{}"), SHAS)
    garbage = kat_event(metadata_json="{not json")
    assert garbage.metadata == {}  # what reads show
    with pytest.raises(signing.SigningError, match="not readable JSON"):
        signing.event_fields(garbage)
    with pytest.raises(signing.SigningError):
        signing.sign_event(pair, garbage, SHAS)
    body = signing.body_sha256(garbage.body)
    assert signing.verify(
        pair.public, signed_empty, signing.event_fields(kat_event(metadata_json="{}")), body, SHAS
    )


def test_mistyped_fields_and_malformed_hashes_are_refused():
    fields = signing.event_fields(kat_event())
    for name, value in [("origin_seq", "1"), ("origin_seq", True), ("topic", 5), ("id", None)]:
        with pytest.raises(signing.SigningError, match=name):
            signing.signing_payload({**fields, name: value}, "0" * 64, SHAS)
    with pytest.raises(signing.SigningError, match="metadata"):
        signing.signing_payload({**fields, "metadata": []}, "0" * 64, SHAS)
    with pytest.raises(signing.SigningError, match="body_sha256"):
        signing.signing_payload(fields, "A" * 64, SHAS)
    with pytest.raises(signing.SigningError, match="sha256 of art_1"):
        signing.signing_payload(fields, "0" * 64, {**SHAS, "art_1": "xyz"})


def test_malformed_signatures_do_not_verify_and_do_not_raise():
    pair = KeyPair.from_seed(SEED)
    for bad in ("", KAT_SIGNATURE[:-1], KAT_SIGNATURE + "=", "!" * 86, KAT_SIGNATURE.upper()):
        assert not verifies(pair, bad, kat_event())
    assert not verifies(KeyPair.generate(), KAT_SIGNATURE, kat_event())


# --------------------------------------------------------------------------- properties
_TEXT = st.text(min_size=1, max_size=12)
_MUTATIONS = {
    "id": _TEXT,
    "origin_replica": _TEXT,
    "origin_seq": st.integers(min_value=0, max_value=2**53 - 1),
    "hlc": _TEXT,
    "type": _TEXT,
    "stream": _TEXT,
    "room": _TEXT,
    "topic": st.none() | _TEXT,
    "from_agent": _TEXT,
    "to_agent": st.none() | _TEXT,
    "correlation_id": st.none() | _TEXT,
    "branch": st.none() | _TEXT,
    "base_commit": st.none() | _TEXT,
    "status": st.none() | _TEXT,
    "created_at": _TEXT,
    "body": st.text(max_size=30),
    "metadata_json": st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=3).map(
        json.dumps
    ),
    "artifact_ids": st.lists(st.sampled_from(["art_1", "art_2"]), max_size=3).map(tuple),
}


@given(st.sampled_from(sorted(_MUTATIONS)), st.data())
def test_changing_any_signed_field_or_the_body_breaks_the_signature(name, data):
    pair = KeyPair.from_seed(SEED)
    original = kat_event()
    value = data.draw(_MUTATIONS[name])
    changed = kat_event(**{name: value})
    same = signing.event_fields(changed) == signing.event_fields(original) and (
        changed.body == original.body
    )
    if name == "artifact_ids" and sorted(value) == sorted(original.artifact_ids):
        same = True
    assert verifies(pair, KAT_SIGNATURE, changed) is same


@given(st.sampled_from(["art_1", "art_2"]), st.binary(max_size=16))
def test_changing_an_artifacts_sha256_breaks_the_signature(artifact, content):
    pair = KeyPair.from_seed(SEED)
    shas = {**SHAS, artifact: hashlib.sha256(content).hexdigest()}
    assert verifies(pair, KAT_SIGNATURE, kat_event(), shas=shas) is (shas == SHAS)


@given(
    st.dictionaries(
        st.text(max_size=6),
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=5),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
            max_leaves=8,
        ),
        max_size=4,
    ),
    st.sampled_from([None, 1, 4]),
    st.booleans(),
)
def test_re_encoding_metadata_json_keeps_the_signature(metadata, indent, sort_keys):
    pair = KeyPair.generate()
    event = kat_event(metadata_json=json.dumps(metadata))
    sig = signing.sign_event(pair, event, SHAS)
    text = json.dumps(dict(reversed(list(metadata.items()))), indent=indent, sort_keys=sort_keys)
    assert verifies(pair, sig, kat_event(metadata_json=text))


def test_keys_module_decodes_signatures_of_exactly_64_bytes():
    raw = keys.b64url_decode(KAT_SIGNATURE, size=keys.SIGNATURE_BYTES)
    assert len(raw) == 64 and keys.b64url_encode(raw) == KAT_SIGNATURE
