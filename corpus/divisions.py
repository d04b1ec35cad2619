"""China's administrative divisions (行政区划) from the code table cpca ships, and the places a text names.

The table is cpca 0.5.5's ``resources/adcodes.csv`` (3,511 divisions, 12-digit codes whose first 6 digits are the
GB/T 2260 code: 2 province, 2 city, 2 county). It is read by :func:`load_divisions` from the installed package's
folder without importing cpca: cpca 0.5.5 reads that file through ``pkg_resources``, which setuptools >= 81 no
longer ships, so ``import cpca`` fails in this environment. Matching uses pyahocorasick (cpca's own matcher).

Levels: ``national`` (code ``000000``, 全国), ``province`` (省, 自治区, 直辖市, 特别行政区), ``city`` (地级市, 自治州,
地区, 盟) and ``county`` (区, 县, 县级市, 旗). The placeholder rows 市辖区 / 县 / 省直辖县级行政区划 are no places:
their children hang from the province (北京市东城区 ⊂ 北京市 ⊂ 全国).

Short names (cpca's rule, SPEC §2 jurisdiction): a province or city name without its 省/市/自治区/自治州/地区/盟
ending and ethnic names (浙江, 青岛, 广西, 延边); county names are matched only in full (two-character county
stems such as 和平, 城关 are ordinary words).
"""
from __future__ import annotations

import csv
import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import ahocorasick

NATIONAL = "000000"
LEVELS = ("national", "province", "city", "county")
_PLACEHOLDERS = frozenset(("市辖区", "县", "省直辖县级行政区划", "自治区直辖县级行政区划"))
_SPECIAL_SHORT = {"内蒙古自治区": "内蒙古", "广西壮族自治区": "广西", "西藏自治区": "西藏", "新疆维吾尔自治区": "新疆",
                  "宁夏回族自治区": "宁夏", "香港特别行政区": "香港", "澳门特别行政区": "澳门"}
_CITY_END = re.compile(r"(?:自治州|地区|盟|市|省)$")
# Short forms that are more often ordinary words than places in policy titles (海南 is the province's short name,
# 吉林 the province's: kept; 城中 / 白山 … never arise because county stems are not matched).
_NOT_SHORT = frozenset(("中山", "通化", "和田", "阿里", "三沙", "儋州", "海东", "海西", "海北", "海南", "果洛",
                        "玉树", "黄南"))


@dataclass(frozen=True)
class Division:
    """One administrative division: 6-digit ``code``, full ``name``, ``short`` names (may be empty), ``level``
    (one of :data:`LEVELS`) and the ``parent`` code (None for 全国)."""

    code: str
    name: str
    short: tuple[str, ...]
    level: str
    parent: str | None


@dataclass(frozen=True)
class Place:
    """A place named in a text: the chosen ``code``, the matched ``surface`` string, its char offsets
    ``[start, end)``, and every division the surface may name (``candidates``; more than one for 朝阳区 …)."""

    code: str
    surface: str
    start: int
    end: int
    candidates: tuple[str, ...]


def adcodes_path() -> Path:
    """The ``adcodes.csv`` file of the installed cpca package (found without importing it).

    Raises:
        FileNotFoundError: cpca is not installed or its data file is missing.
    """
    spec = importlib.util.find_spec("cpca")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the cpca package is not installed (pip install cpca==0.5.5): no division data")
    path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "adcodes.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: cpca's division table is missing")
    return path


@lru_cache(maxsize=1)
def _nations() -> tuple[str, ...]:
    """The 56 ethnic group names of cpca's ``56_nations.csv`` (蒙古族 …), with and without 族, longest first."""
    path = adcodes_path().parent / "56_nations.csv"
    names = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return tuple(sorted({*names, *(n[:-1] for n in names if n.endswith("族") and len(n) > 2)}, key=len, reverse=True))


def _short_names(name: str, level: str) -> tuple[str, ...]:
    """Short names of a province or city (浙江省 -> 浙江; 延边朝鲜族自治州 -> 延边); none for counties."""
    if level not in ("province", "city"):
        return ()
    if name in _SPECIAL_SHORT:
        return (_SPECIAL_SHORT[name],)
    stem = _CITY_END.sub("", name)
    nations = _nations()
    while True:  # 湘西土家族苗族 -> 湘西
        strip = next((n for n in nations if stem.endswith(n) and len(stem) > len(n)), None)
        if strip is None:
            break
        stem = stem[:-len(strip)]
    if len(stem) < 2 or stem == name or stem in _NOT_SHORT:
        return ()
    return (stem,)


def _level_and_parent(code: str, names: dict[str, str]) -> tuple[str, str]:
    """Level of a 6-digit code and its parent (placeholder cities skipped: a county of 北京 hangs from 北京市)."""
    prov, city = code[:2] + "0000", code[:4] + "00"
    if code == prov:
        return "province", NATIONAL
    if code == city:
        return "city", prov
    return "county", city if names.get(city) not in _PLACEHOLDERS and city in names else prov


@lru_cache(maxsize=4)
def load_divisions(path: str | None = None) -> dict[str, Division]:
    """Every division by 6-digit code, 全国 (``000000``) included, from cpca's table (``path`` overrides it).

    Raises:
        FileNotFoundError: the table is missing.
        ValueError: the table lacks the ``adcode,name`` columns.
    """
    src = Path(path) if path else adcodes_path()
    with open(src, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or not {"adcode", "name"} <= set(rows[0]):
        raise ValueError(f"{src}: not a division table (needs columns adcode,name)")
    names = {r["adcode"][:6]: r["name"].strip() for r in rows}
    out = {NATIONAL: Division(NATIONAL, "全国", ("中华人民共和国", "中国", "国家"), "national", None)}
    for code, name in sorted(names.items()):
        if name in _PLACEHOLDERS:
            continue
        level, parent = _level_and_parent(code, names)
        out[code] = Division(code, name, _short_names(name, level), level, parent)
    return out


def ancestors(code: str, divisions: dict[str, Division] | None = None) -> list[str]:
    """The codes above ``code``, nearest first, ending with ``000000`` (青岛市 -> [山东省, 全国]).

    Raises:
        KeyError: an unknown code.
    """
    divs = divisions or load_divisions()
    out, parent = [], divs[code].parent
    while parent is not None:
        out.append(parent)
        parent = divs[parent].parent
    return out


def contains(outer: str, inner: str, divisions: dict[str, Division] | None = None) -> bool:
    """Whether division ``outer`` contains (or is) ``inner``: contains("370000", "370200") is True; 全国
    contains every division.

    Raises:
        KeyError: an unknown ``inner`` code.
    """
    return outer == inner or outer in ancestors(inner, divisions)


def province_of(code: str, divisions: dict[str, Division] | None = None) -> str | None:
    """The province-level code of ``code`` (itself for a province), None for 全国."""
    divs = divisions or load_divisions()
    chain = [code, *ancestors(code, divs)]
    return next((c for c in chain if divs[c].level == "province"), None)


@lru_cache(maxsize=4)
def _automaton(path: str | None = None) -> ahocorasick.Automaton:
    """Aho-Corasick automaton: surface string -> (surface, codes it may name), full names of every division
    and short names of provinces and cities (全国's aliases are left out: 中国 is in 中国人民银行)."""
    by_surface: dict[str, list[str]] = {}
    for d in load_divisions(path).values():
        if d.code == NATIONAL:
            continue
        for s in (d.name, *d.short):
            by_surface.setdefault(s, []).append(d.code)
    auto = ahocorasick.Automaton()
    for s, codes in by_surface.items():
        auto.add_word(s, (s, tuple(codes)))
    auto.make_automaton()
    return auto


def _choose(codes: tuple[str, ...], seen: list[str], divs: dict[str, Division]) -> str:
    """One of several divisions sharing a name: the one inside a place named before, else the highest level
    (a city before a county of the same name), else the first."""
    for prior in reversed(seen):
        inside = [c for c in codes if contains(prior, c, divs)]
        if inside:
            return inside[0]
    return min(codes, key=lambda c: LEVELS.index(divs[c].level))


def find_places(text: str, path: str | None = None) -> list[Place]:
    """Places named in ``text``, in text order: leftmost-longest, non-overlapping matches of full names and
    province/city short names (浙江省, 浙江, 青岛市, 青岛, 市北区). A name shared by several divisions resolves
    to the one inside a place named earlier (青岛市市北区 -> 370203), else to the highest level.

    Returns:
        :class:`Place` list (empty for an empty text). Offsets are chars of ``text``.
    """
    if not text:
        return []
    divs = load_divisions(path)
    hits = sorted(((end - len(s) + 1, end + 1, s, codes) for end, (s, codes) in _automaton(path).iter(text)),
                  key=lambda h: (h[0], -(h[1] - h[0])))
    out: list[Place] = []
    pos = 0
    for start, end, s, codes in hits:
        if start < pos or text[end:end + 1] == "级":  # 和县级: 和 + 县级, not 和县
            continue
        code = _choose(codes, [p.code for p in out], divs)
        out.append(Place(code, s, start, end, codes))
        pos = end
    return out
