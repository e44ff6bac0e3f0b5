import pytest

from gateway.jsonbody import MAX_DEPTH, load_json


def test_bodies_up_to_the_depth_limit_decode():
    body = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    value = load_json(body)
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []
    assert load_json(b'{"method": "x", "arguments": {"a": {"b": [1, {"c": null}]}}}')["method"] == "x"


@pytest.mark.parametrize(
    "body",
    [
        b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
        b'{"a":' * 100_000,  # deep enough that the decoder itself gives up (RecursionError)
        b"[" * 100_000,
    ],
)
def test_deeper_bodies_are_one_value_error(body):
    with pytest.raises(ValueError, match=f"JSON nested deeper than {MAX_DEPTH} levels"):
        load_json(body)


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe"])
def test_other_garbage_is_a_value_error_too(body):
    with pytest.raises(ValueError):
        load_json(body)
