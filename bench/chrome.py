"""Site chromes for the quality bench: the header, menus, sidebars and footer a page's real text
is served in.

:class:`Chrome` splits a site's page around its content slot. The content sits in
``<div class="content">`` and ends with the ``<!--/content-->`` comment (where
:mod:`bench.mirrors` looks for paragraphs to put an advert after). Each page varies only in
its title and breadcrumb; everything else is the site's template, repeated on every page.

* :func:`english_chrome`: an English site built from real text (link labels are titles of real
  manual pages, blurbs real paragraphs). ``large``: ~1,000+ words, all in plain ``<div>`` s
  (only template learning can take it out); else a ~300-word chrome in ``header``/``nav``/
  ``footer`` plus a ``<div>`` sidebar.
* :func:`cjk_chrome`: a Japanese (``ja``) or Chinese (``zh``) site, hand-written text, in
  ``header``/``nav``/``footer`` plus a ``<div>`` sidebar of notices and popular articles.
"""

# ruff: noqa: RUF001 (Chinese and Japanese text: full-width punctuation is meant)
from __future__ import annotations

import html as htmllib
import random
from dataclasses import dataclass

esc = htmllib.escape

COOKIE = (
    "We use cookies to remember your preferences, to measure which pages are read and to keep "
    "this site secure. Essential cookies cannot be switched off; the others help us decide "
    "which tutorials to write next. You can accept all cookies, reject the optional ones or "
    "choose the purposes you agree to, and change your choice at any time from the privacy "
    "link at the bottom of every page."
)
NEWSLETTER = (
    "Subscribe to our newsletter: one email a month with new tutorials, release notes and "
    "tips from our editors. No spam, and you can unsubscribe with one click at any time."
)

CJK = {
    "ja": {
        "tagline": "Debian GNU/Linux を毎日使う人のための実践的な解説集",
        "menu": "ホーム はじめに インストール パッケージ管理 システム設定 ネットワーク "
        "セキュリティ バックアップ 開発環境 よくある質問 用語集 お問い合わせ",
        "home": "ホーム",
        "news_title": "お知らせ",
        "news": (
            "2024年版の改訂作業を進めています。誤りを見つけた方は掲示板までお知らせください。",
            "サーバーの移転に伴い、一部のページの URL が変更されました。ブックマークの更新を"
            "お願いします。",
            "翻訳ボランティアを募集しています。日本語の文章を読みやすく整えるお手伝いをして"
            "いただける方を歓迎します。",
            "当サイトの内容は Debian プロジェクトの公式文書ではありません。最新の情報は公式"
            "サイトでご確認ください。",
        ),
        "popular": "人気の記事",
        "about": "当サイトについて: Debian リファレンスをもとに、日常の管理作業で役立つ情報を"
        "章ごとに整理して掲載しています。記事の内容は GNU 一般公衆利用許諾書のもとで"
        "自由に再配布できます。",
        "legal": "プライバシーポリシー | 利用規約 | サイトマップ | 広告掲載について",
        "copyright": "Copyright © 2013-2024 {site} 編集部. All rights reserved.",
    },
    "zh": {
        "tagline": "面向 Debian GNU/Linux 日常用户的实用指南合集",
        "menu": "首页 入门 安装 软件包管理 系统配置 网络 安全 备份 开发环境 常见问题 术语表 "
        "联系我们",
        "home": "首页",
        "news_title": "网站公告",
        "news": (
            "2024 年版的修订工作正在进行中，发现错误的读者请在留言板告诉我们。",
            "由于服务器迁移，部分页面的网址已经改变，请更新您的书签。",
            "我们正在招募翻译志愿者，欢迎愿意帮助润色中文译文的朋友加入。",
            "本站内容并非 Debian 项目的官方文档，最新信息请以官方网站为准。",
        ),
        "popular": "热门文章",
        "about": "关于本站：本站根据 Debian 参考手册，按章节整理日常系统管理工作中有用的信息。"
        "文章内容可依照 GNU 通用公共许可证自由再发布。",
        "legal": "隐私政策 | 使用条款 | 网站地图 | 广告合作",
        "copyright": "版权所有 © 2013-2024 {site} 编辑部。保留所有权利。",
    },
}


@dataclass(frozen=True)
class Chrome:
    """A site's page around its content slot (``{title}`` and ``{crumbs}`` filled per page)."""

    site: str
    lang: str
    before: str
    after: str

    def page(self, title: str, content: str, crumbs: str = "") -> str:
        """A full page: ``content`` (HTML) in the site's chrome."""
        head = self.before.replace("{title}", esc(title)).replace("{crumbs}", esc(crumbs))
        return f'{head}<div class="content">{content}<!--/content--></div>{self.after}'

    def words(self) -> int:
        """Words of the chrome's markup-free text (white-space split; rough for CJK)."""
        from crawler.content.text import visible_text

        return len(visible_text(self.page("", "")).split())


def _links(cls: str, labels: list[str], prefix: str) -> str:
    items = "".join(f'<div class="item"><a href="{prefix}{i}.html">{esc(t)}</a></div>'
                    for i, t in enumerate(labels))  # fmt: skip
    return f'<div class="{cls}">{items}</div>'


def _head(site: str, lang: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="utf-8">'
        f'<title>{{title}} | {esc(site)}</title></head>\n<body><div id="page">\n'
    )


def english_chrome(
    site: str, labels: list[str], prose: list[str], rng: random.Random, *, large: bool
) -> Chrome:
    """An English site's chrome from real link ``labels`` and ``prose`` paragraphs."""

    def pick(n: int) -> list[str]:
        return [labels[rng.randrange(len(labels))] for _ in range(n)]

    about, legal = " ".join(prose[: len(prose) // 2]), " ".join(prose[len(prose) // 2 :])
    tag = "div" if large else "header"
    mega = f'<div class="mega-menu">{_links("menu-group", pick(64), "/guide/")}</div>'
    before = _head(site, "en") + (
        f'<{tag} class="site-header"><div class="logo"><a href="/">{esc(site)}</a></div>'
        f"{_links('menu', pick(40 if large else 12), '/topics/')}</{tag}>\n"
        + (f'<div class="cookie-banner">{COOKIE}</div>{mega}' if large else "")
        + '<div class="breadcrumb">Home / {crumbs}</div>\n<div class="layout">'
    )
    foot = "div" if large else "footer"
    after = (
        f'<div class="sidebar"><div class="widget-title">Popular pages</div>'
        f"{_links('popular', pick(16 if large else 8), '/popular/')}"
        f'<div class="about"><div class="widget-title">About {esc(site)}</div>'
        f"<p>{esc(about)}</p></div>"
        + (f'<div class="newsletter">{NEWSLETTER}</div>' if large else "")
        + f'</div></div>\n<{foot} class="site-footer">'
        + (_links("link-farm", pick(60), "/more/") if large else "")
        + f'<div class="legal"><p>{esc(legal)}</p><p>© 2024 {esc(site)}. All rights '
        f"reserved.</p></div></{foot}>\n</div></body></html>\n"
    )
    return Chrome(site, "en", before, after)


def cjk_chrome(lang: str, site: str, popular: list[str]) -> Chrome:
    """A Japanese or Chinese site's chrome; ``popular``: titles of its popular articles."""
    s = CJK[lang]
    menu = "".join(f'<a href="/m{i}/">{m}</a> ' for i, m in enumerate(str(s["menu"]).split()))
    news = "".join(f'<div class="notice">{n}</div>' for n in s["news"])
    before = _head(site, lang) + (
        f'<header class="site-header"><div class="logo"><a href="/">{esc(site)}</a></div>'
        f'<div class="tagline">{s["tagline"]}</div></header>\n<nav class="menu">{menu}</nav>\n'
        f'<div class="breadcrumb">{s["home"]} » {{crumbs}}</div>\n<div class="layout">'
    )
    after = (
        f'<div class="sidebar"><div class="widget"><div class="widget-title">{s["news_title"]}'
        f'</div>{news}</div><div class="widget"><div class="widget-title">{s["popular"]}</div>'
        f"{_links('popular', popular, '/popular/')}</div></div></div>\n"
        f'<footer class="site-footer"><div class="about">{s["about"]}</div>'
        f'<div class="legal">{s["legal"]}</div>'
        f'<div class="copyright">{esc(str(s["copyright"]).format(site=site))}</div></footer>\n'
        "</div></body></html>\n"
    )
    return Chrome(site, lang, before, after)
