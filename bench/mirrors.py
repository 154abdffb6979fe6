"""Mirrors planted in the quality bench's page sets, differing from their original as real
mirrors do.

A mirror (:func:`mirror_html`) is the original page's HTML with

1. the site's name changed (every match of the style's ``site_pattern``; a ``<title>`` without
   it gets `` | <mirror name>`` appended),
2. an advert block inserted after a random paragraph of the main content: a label and one
   10-30-word sentence drawn from a pool of eight per language (adverts rotate: each mirror
   draws its own), in a ``<div class="sponsored">`` as ad slots are marked up. With so small
   a pool an advert soon sits on ``TemplateFilter.min_pages``
   kept mirrors and becomes template on the mirror host (then it no longer counts);
   ``MirrorStyle.unique_ads`` makes each a plain paragraph (no ad class, no link) with a
   campaign number (``#123456``) of its own, so no advert block repeats and nothing marks
   it (a large ad inventory served as plain text),
3. a "Last updated <date time>" line (localized) at the start or the end of the main content.

The main content is found by markers: it starts after the first match of
:data:`START_PATTERNS` (tried in that order; else after ``<body>``) and ends at the tag holding
the first of :data:`END_MARKERS` after it (else at ``</body>``). :func:`plant` gives about
``fraction`` of the originals one mirror each on the mirror host and ``copies`` others a
byte-exact copy on their own host. Seeded: the same ``rng`` state plants the same mirrors.
"""

# ruff: noqa: RUF001 (Chinese and Japanese text: full-width punctuation is meant)
from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from bench.pages import SetPage

ADVERTS = {
    "en": (
        "Switch to Northwind Cloud hosting today and get three months free on any managed "
        "database plan, with daily backups and support included.",
        "Learn Python the practical way with live online classes from working engineers; enrol "
        "before Friday and save forty percent on the twelve-week course.",
        "Keep your servers safe with Bastion Shield, the firewall that blocks intrusions "
        "automatically. Start a free thirty-day trial, no credit card required.",
        "Fast fibre broadband from Lumen Net, up to one gigabit per second with free "
        "installation and a wireless router included in every plan.",
        "Refurbished laptops from Second Byte, every machine tested and guaranteed for two "
        "years, with free delivery and student discounts.",
        "Hiring developers? Post your job on CodeHire and reach thousands of experienced "
        "engineers looking for their next role.",
        "Cheap domain names from Registrar One: only one dollar for the first year.",
        "Programming books at half price this week only: databases, networking, security and "
        "software design titles from every major publisher.",
    ),
    "ja": (
        "格安レンタルサーバーなら今だけ初期費用無料、月額わずか三百円から始められます。"
        "詳しくは公式サイトへ。",
        "プログラミングスクール受講生募集中、未経験から三か月でエンジニアを目指せる"
        "オンライン講座です。",
        "高速光回線のお申し込みで最大三万円キャッシュバック、工事費も実質無料の"
        "キャンペーン実施中。",
        "クラウドストレージ容量二倍キャンペーン、写真も書類も自動でバックアップして安心です。",
        "中古ノートパソコン専門店、全品動作保証付きで送料無料、学生の方はさらに一割引き。",
        "転職をお考えのITエンジニアの方へ、年収アップ事例多数の転職支援サービスに無料登録。",
        "英会話レッスンが一回二百円から、スマートフォンでいつでもどこでも学べます。",
        "セキュリティ対策ソフトが今なら半額、ウイルスや詐欺サイトから家族全員の端末を守ります。",
    ),
    "zh": (
        "云服务器限时特惠，新用户首年仅需九十九元，稳定高速，立即注册即可领取代金券。",
        "零基础学编程，三个月成为全栈工程师，名师在线辅导，先试听后付费。",
        "千兆光纤宽带办理送路由器，包年套餐低至每月五十元，免费上门安装。",
        "网盘会员双倍容量活动进行中，照片文件自动备份，再也不怕数据丢失。",
        "二手笔记本电脑专卖，全场质保一年，包邮到家，学生凭证再享九折优惠。",
        "程序员跳槽找工作，上百家互联网企业高薪职位等你来投递，注册完全免费。",
        "在线英语口语课程每节课只要十元，外教一对一，手机随时随地上课。",
        "杀毒软件限时五折，全面保护全家设备免受病毒和钓鱼网站侵害。",
    ),
}
AD_LABEL = {"en": "Advertisement", "ja": "広告", "zh": "广告"}
UPDATED = {"en": "Last updated %Y-%m-%d %H:%M:%S", "ja": "最終更新日時: %Y年%m月%d日 %H:%M",
           "zh": "最后更新：%Y-%m-%d %H:%M:%S"}  # fmt: skip
#: Where the main content starts: after the first match of these patterns (tried in order).
START_PATTERNS = (r'<div class="content">', r'<[^>]*\brole="main"[^>]*>', r"<main\b[^>]*>",
                  r"<article\b[^>]*>", r'<div class="navheader">.*?</div>')  # fmt: skip
#: Where it ends: the first of these after its start, else ``</body>``.
END_MARKERS = ("<!--/content-->", 'class="sphinxsidebar"', 'class="navfooter"', "</main>",
               "</article>")  # fmt: skip
_EPOCH = datetime(2023, 1, 1)


@dataclass(frozen=True)
class MirrorStyle:
    """How a site's pages are mirrored: language, the site's name (a regex), the mirror's;
    ``unique_ads``: each advert ends with a campaign number of its own."""

    lang: str
    site_pattern: str
    mirror_name: str
    unique_ads: bool = False


def content_span(html: str) -> tuple[int, int]:
    """``(start, end)`` offsets of the main content (see the module docstring)."""
    found = next((m for p in START_PATTERNS if (m := re.search(p, html, re.S))), None)
    if found is None:
        found = re.search(r"<body[^>]*>", html)
    start = found.end() if found else 0
    ends = [at for m in END_MARKERS if (at := html.find(m, start)) >= 0]
    body_end = html.rfind("</body>")
    end = min(ends) if ends else (body_end if body_end >= start else len(html))
    tag = html.rfind("<", start, end + 1)  # a marker inside a tag: end before that tag
    return start, tag if tag >= start else end


def rename_site(html: str, style: MirrorStyle) -> str:
    renamed, found = re.subn(style.site_pattern, style.mirror_name, html)
    if not found or not re.search(re.escape(style.mirror_name), _title(renamed)):
        renamed = renamed.replace("</title>", f" | {style.mirror_name}</title>", 1)
    return renamed


def _title(html: str) -> str:
    found = re.search(r"<title>(.*?)</title>", html, re.S)
    return found.group(1) if found else ""


def advert_html(lang: str, rng: random.Random, unique: bool = False) -> str:
    """An advert as ad slots are marked up (a ``sponsored`` block, a link); ``unique``: a
    plain paragraph with a campaign number of its own, that no markup rule and no template
    learning can find (the hardest case)."""
    text = rng.choice(ADVERTS[lang])
    if unique:  # a block of its own: never template, whatever the pool; nothing marks it
        return f"<p>{AD_LABEL[lang]}: {text} #{rng.randrange(10**5, 10**6)}</p>"
    link = f"https://ads.example/c/{rng.randrange(10**6)}"
    label = f'<div class="label">{AD_LABEL[lang]}</div>'
    return f'<div class="sponsored">{label}<p><a href="{link}">{text}</a></p></div>'


def updated_html(lang: str, rng: random.Random) -> str:
    when = _EPOCH + timedelta(seconds=rng.randrange(3 * 365 * 86400))
    return f'<p class="updated">{when.strftime(UPDATED[lang])}</p>'


def mirror_html(html: str, style: MirrorStyle, rng: random.Random) -> str:
    """The mirror of one page (see the module docstring)."""
    html = rename_site(html, style)
    start, end = content_span(html)
    para_ends = [m.end() for m in re.finditer(r"</p>", html[start:end])]
    ad_at = start + rng.choice(para_ends) if para_ends else start
    stamp_at = start if rng.random() < 0.5 else end
    inserts = sorted([(ad_at, 1, advert_html(style.lang, rng, style.unique_ads)),
                      (stamp_at, 0, updated_html(style.lang, rng))], reverse=True)  # fmt: skip
    for at, _, snippet in inserts:
        html = html[:at] + snippet + html[at:]
    return html


def plant(
    originals: list[SetPage], style: MirrorStyle, rng: random.Random, mirror_base: str,
    *, fraction: float = 0.4, copies: int = 3,
) -> list[SetPage]:  # fmt: skip
    """``originals`` (grouped where planted on), their mirrors and their byte copies.

    ``round(fraction * n)`` originals get one mirror each at ``mirror_base`` + their path;
    ``copies`` others a byte-exact copy at ``/copies`` + their path on their own host. A
    planted-on original's ``group`` becomes its URL, shared by its mirror or copy.
    """
    order = list(range(len(originals)))
    rng.shuffle(order)
    mirrored = set(order[: round(fraction * len(originals))])
    copied = set(order[len(mirrored) : len(mirrored) + copies])
    out: list[SetPage] = []
    extra: list[SetPage] = []
    for i, page in enumerate(originals):
        parts = urlsplit(page.url)
        if i in mirrored:
            page = replace(page, group=page.url)
            extra.append(SetPage(mirror_base + parts.path, mirror_html(page.html, style, rng),
                                 page.url, "mirror"))  # fmt: skip
        elif i in copied:
            page = replace(page, group=page.url)
            url = f"{parts.scheme}://{parts.netloc}/copies{parts.path}"
            extra.append(SetPage(url, page.html, page.url, "copy"))
        out.append(page)
    return out + extra
