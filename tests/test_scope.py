"""retrieval.scope: scopes from questions and filters, hostile filter values, allowed documents."""
import pytest

from policy.record import PolicyRecord
from retrieval.scope import Scope, allowed_docs, parse_filters, scope_from_question

RECORDS = [
    PolicyRecord("zj", jurisdiction_code="330000", level="地方性法规", validity="有效", issuer="浙江省人大常委会"),
    PolicyRecord("sd", jurisdiction_code="370000", level="地方性法规", validity="有效"),
    PolicyRecord("qd", jurisdiction_code="370200", level="地方政府规章", validity="废止"),
    PolicyRecord("cn", jurisdiction_code="000000", level="法律", validity="有效", issuer="全国人民代表大会常务委员会"),
    PolicyRecord("hz", jurisdiction_code="330100", level="规范性文件", validity="未知"),
    PolicyRecord("nowhere"),
]


def test_question_place_is_inferred_with_parents():
    scope = scope_from_question("浙江省物业管理条例对业主大会有何规定")
    assert scope.inferred and scope.asked == ("330000",)
    assert scope.label() == "范围：浙江省 + 国家"
    assert allowed_docs(scope, RECORDS) == {"zj", "cn", "hz"}


def test_city_scope_accepts_province_and_national():
    scope = scope_from_question("青岛市 物业服务收费")
    assert allowed_docs(scope, RECORDS) == {"qd", "sd", "cn"}


def test_no_place_no_restriction_and_explicit_region_wins():
    assert allowed_docs(scope_from_question("物业服务收费如何规定"), RECORDS) is None
    scope = scope_from_question("浙江省物业", base=parse_filters({"region": "山东省"}))
    assert not scope.inferred and allowed_docs(scope, RECORDS) == {"sd", "qd", "cn"}


def test_level_issuer_in_force_filters():
    assert allowed_docs(parse_filters({"level": "法律,地方性法规"}), RECORDS) == {"zj", "sd", "cn"}
    assert allowed_docs(parse_filters({"issuer": "全国人民代表大会"}), RECORDS) == {"cn"}
    scope = parse_filters({"region": "青岛市", "in_force": "true"})
    assert allowed_docs(scope, RECORDS) == {"sd", "cn"}


@pytest.mark.parametrize("filters, field", [
    ({"region": "火星省"}, "region"), ({"region": "浙" * 10_000}, "region"), ({"from": "2020-13-01"}, "from"),
    ({"to": "yesterday"}, "to"), ({"level": "圣旨"}, "level"), ({"in_force": "maybe"}, "in_force"),
    ({"from": "2021", "to": "2020"}, "from"), ({"region": ["x"] * 100}, "region"), ({"issuer": 5}, "issuer"),
])
def test_hostile_filters_name_the_field(filters, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        parse_filters(filters)


def test_empty_scope():
    assert Scope().empty and parse_filters({}).empty and parse_filters(None).empty
