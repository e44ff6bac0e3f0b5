import pytest

from gateway.routing import (
    DirectMatcher,
    FanoutMatcher,
    HeadersMatcher,
    TopicMatcher,
    freeze,
    matcher_for,
    topic_words,
)


def topic(*keys):
    matcher = TopicMatcher()
    for key in keys:
        matcher.bind(key, None, key)
    return matcher


def test_direct_matches_exact_key_only():
    m = DirectMatcher()
    assert m.bind("a", None, "q1")
    assert m.bind("a", None, "q2")
    assert m.bind("b", None, "q1")
    assert m.match("a", None) == {"q1", "q2"}
    assert m.match("b", None) == {"q1"}
    assert m.match("c", None) == set()
    assert m.match("A", None) == set()


def test_bind_twice_is_false_and_unbind_unknown_is_false():
    m = DirectMatcher()
    assert m.bind("a", {"x": 1}, "q")
    assert not m.bind("a", {"x": 1}, "q")
    assert len(m) == 1
    assert not m.unbind("a", None, "q")
    assert m.unbind("a", {"x": 1}, "q")
    assert len(m) == 0
    assert m.match("a", None) == set()


def test_same_destination_bound_with_different_arguments_is_two_bindings_one_match():
    m = DirectMatcher()
    m.bind("a", {"x": 1}, "q")
    m.bind("a", {"x": 2}, "q")
    assert len(m) == 2
    assert m.match("a", None) == {"q"}
    m.unbind("a", {"x": 1}, "q")
    assert m.match("a", None) == {"q"}
    m.unbind("a", {"x": 2}, "q")
    assert m.match("a", None) == set()


def test_bindings_lists_key_arguments_destination():
    m = FanoutMatcher()
    m.bind("k", {"a": [1, {"b": 2}]}, "q")
    assert m.bindings() == [("k", {"a": [1, {"b": 2}]}, "q")]


def test_fanout_ignores_key():
    m = FanoutMatcher()
    m.bind("x", None, "q1")
    m.bind("y", None, "q2")
    assert m.match("anything", None) == {"q1", "q2"}
    m.unbind("x", None, "q1")
    assert m.match("", None) == {"q2"}


def test_topic_words_follow_rabbitmq():
    assert topic_words("") == []
    assert topic_words("a") == ["a"]
    assert topic_words("a..b") == ["a", "", "b"]
    assert topic_words("a.") == ["a", ""]
    assert topic_words(".") == ["", ""]


@pytest.mark.parametrize(
    "binding, key, matches",
    [
        ("a.b.c", "a.b.c", True),
        ("a.b.c", "a.b", False),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.c", False),
        ("a.*.c", "a.b.b.c", False),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.b.b.c", True),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("#.a", "a", True),
        ("#.a", "x.y.a", True),
        ("#", "", True),
        ("#", "a.b", True),
        ("*", "", False),
        ("*", "a", True),
        ("*", "a.b", False),
        ("", "", True),
        ("", "a", False),
        ("a..b", "a..b", True),
        ("a.*.b", "a..b", True),
        ("a.#.b", "a..b", True),
        ("a.", "a.", True),
        ("a.", "a", False),
        ("#.#", "", True),
        ("#.#", "a.b.c", True),
        ("#.*", "", False),
        ("#.*", "a", True),
        ("*.#.*", "a", False),
        ("*.#.*", "a.b", True),
        ("#.b.#", "a.b.c", True),
        ("#.b.#", "a.c", False),
        ("a.#.#.b", "a.b", True),
        ("a.#.#.b", "a.x.y.b", True),
    ],
)
def test_topic_patterns(binding, key, matches):
    assert (topic(binding).match(key, None) == {binding}) is matches


def test_topic_many_bindings_and_duplicates_reported_once():
    m = topic("a.*", "a.#", "#", "b.*")
    m.bind("a.b", None, "a.*")
    assert m.match("a.b", None) == {"a.*", "a.#", "#"}
    assert m.match("b.c", None) == {"b.*", "#"}


def test_topic_unbind_prunes_trie():
    m = TopicMatcher()
    m.bind("a.b.c", None, "q")
    m.bind("a.#", None, "q2")
    m.unbind("a.b.c", None, "q")
    assert m.match("a.b.c", None) == {"q2"}
    m.unbind("a.#", None, "q2")
    assert m._root.children == {}
    assert len(m) == 0


def test_topic_hash_sequences_stay_fast():
    m = topic("#.#.#.#.#.#.#.#.z")
    key = ".".join(["w"] * 60)
    assert m.match(key, None) == set()
    assert m.match(key + ".z", None) == {"#.#.#.#.#.#.#.#.z"}


def headers(arguments, dest="q"):
    m = HeadersMatcher()
    m.bind("", arguments, dest)
    return m


def test_headers_all_is_default():
    m = headers({"a": 1, "b": "x"})
    assert m.match("", {"a": 1, "b": "x", "c": 3}) == {"q"}
    assert m.match("", {"a": 1}) == set()
    assert m.match("", None) == set()


def test_headers_any():
    m = headers({"x-match": "any", "a": 1, "b": 2})
    assert m.match("", {"b": 2}) == {"q"}
    assert m.match("", {"a": 2, "b": 1}) == set()


def test_headers_values_compare_by_type():
    m = headers({"a": 1})
    assert m.match("", {"a": True}) == set()
    assert m.match("", {"a": "1"}) == set()


def test_headers_x_keys_ignored_unless_with_x():
    m = headers({"x-match": "all", "x-foo": "bar"})
    assert m.match("", {}) == {"q"}
    m = headers({"x-match": "any", "x-foo": "bar"})
    assert m.match("", {"x-foo": "bar"}) == set()
    m = headers({"x-match": "any-with-x", "x-foo": "bar"})
    assert m.match("", {"x-foo": "bar"}) == {"q"}
    m = headers({"x-match": "all-with-x", "x-foo": "bar", "a": 1})
    assert m.match("", {"a": 1}) == set()
    assert m.match("", {"a": 1, "x-foo": "bar"}) == {"q"}


def test_headers_void_value_matches_presence():
    m = headers({"a": None})
    assert m.match("", {"a": 42}) == {"q"}
    assert m.match("", {"b": 42}) == set()


def test_headers_empty_all_matches_everything_empty_any_nothing():
    assert headers({}).match("", {"z": 1}) == {"q"}
    assert headers({"x-match": "any"}).match("", {"z": 1}) == set()


def test_headers_bad_x_match_raises_and_does_not_bind():
    m = HeadersMatcher()
    with pytest.raises(ValueError, match="x-match"):
        m.bind("", {"x-match": "some"}, "q")
    assert len(m) == 0


def test_headers_unbind():
    m = HeadersMatcher()
    m.bind("", {"a": 1}, "q")
    m.bind("", {"b": 1}, "q")
    assert m.unbind("", {"a": 1}, "q")
    assert m.match("", {"a": 1}) == set()
    assert m.match("", {"b": 1}) == {"q"}


def test_headers_nested_table_values():
    m = headers({"t": {"k": [1, 2]}})
    assert m.match("", {"t": {"k": [1, 2]}}) == {"q"}
    assert m.match("", {"t": {"k": [2, 1]}}) == set()


def test_matcher_for():
    assert isinstance(matcher_for("direct"), DirectMatcher)
    assert isinstance(matcher_for("fanout"), FanoutMatcher)
    assert isinstance(matcher_for("topic"), TopicMatcher)
    assert isinstance(matcher_for("headers"), HeadersMatcher)
    assert matcher_for("topic") is not matcher_for("topic")
    with pytest.raises(ValueError):
        matcher_for("x-consistent-hash")


def test_freeze_is_order_insensitive_for_tables_only():
    assert freeze({"a": 1, "b": 2}) == freeze({"b": 2, "a": 1})
    assert freeze([1, 2]) != freeze([2, 1])
    assert freeze(1) != freeze(True)
