"""The console's polish that a person sees (issue 19, items 2 and 3), in a real browser: on a
phone-sized window the Job page's tables scroll sideways (a focusable region, a message column
wide enough to read) instead of being cut at the card's edge; the record's check badges stay
on one line in the narrow column, in both languages; the wizard's YAML preview keeps a long line
whole (it scrolls) and the Job file's comments.

Debian's Chromium through Playwright against a real ``rlark server`` (the fixtures of
tests/test_console_browser.py); the Jobs fail in their prepare script, so no Ray node starts.
"""

from __future__ import annotations

from tests.test_console_browser import (  # noqa: F401  (fixtures)
    browser_context_args,
    browser_type_launch_args,
    expect,
    failing_job,
    server,
    ui,
)

PHONE = {"width": 390, "height": 844}

#: every table of the page in a scroll region: its size, whether it is a focusable labelled
#: region, and where its last column ends once scrolled to the end
_TABLES = """() => Array.from(document.querySelectorAll('.table-wrap')).map(w => {
  const head = w.querySelector('thead tr th:last-child');
  return {id: w.querySelector('table').id || w.getAttribute('aria-labelledby'),
          wide: w.scrollWidth > w.clientWidth + 1, tabindex: w.getAttribute('tabindex'),
          role: w.getAttribute('role'), label: w.getAttribute('aria-labelledby'),
          overflow: getComputedStyle(w).overflowX};
})"""


def _failed_twice(ui, name: str) -> None:
    ui.server.submit(failing_job(name))
    ui.server.wait_phase(name, {"Failed"}, timeout=60)
    ui.server.cli("restart", name)
    ui.server.wait_phase(name, {"Failed"}, timeout=60)
    ui.server.wait_released(name)


def test_job_page_tables_scroll_sideways_on_a_phone(ui):
    _failed_twice(ui, "phone")
    ui.page.set_viewport_size(PHONE)
    for path in ("/jobs/phone", "/jobs/phone?tab=record", "/jobs/phone?run=1"):
        page = ui.go(path)
        assert page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 0
        tables = page.evaluate(_TABLES)
        wide = [t for t in tables if t["wide"]]
        assert wide, (path, tables)  # a phone is narrower than these tables
        for t in wide:
            # a region of its own that scrolls, that the keyboard reaches, named by its heading
            assert (t["overflow"], t["tabindex"], t["role"]) == ("auto", "0", "region"), (path, t)
            assert page.locator(f"#{t['label']}").count() == 1, (path, t)
        for i, t in enumerate(tables):
            if not t["wide"]:
                continue
            wrap = page.locator(".table-wrap").nth(i)
            wrap.focus()
            page.keyboard.press("End")  # the keys scroll it, to where the last column ends
            wrap.evaluate("w => w.scrollLeft = w.scrollWidth")
            seen = wrap.evaluate("""w => { const r = w.getBoundingClientRect();
                const c = w.querySelector('thead tr th:last-child').getBoundingClientRect();
                return [w.scrollLeft, c.right <= r.right + 1 && c.right > r.left]; }""")
            assert seen[0] > 0 and seen[1], (path, t, seen)
        # a message is read in a column wider than a word
        widths = page.evaluate("() => Array.from(document.querySelectorAll('.table-wrap td.wmsg'))"
                               ".map(td => td.getBoundingClientRect().width)")
        assert min(widths, default=150) >= 150 and (widths or "record" in path), (path, widths)
        ui.shot("phone-" + path.strip("/").replace("/", "-").replace("?", "-").replace("=", ""))


def test_check_badges_stay_on_one_line(ui):
    ui.server.submit(failing_job("badges"))
    ui.server.wait_phase("badges", {"Failed"}, timeout=60)
    ui.server.wait_released("badges")
    for lang in ("en", "zh-CN"):
        ui.go(f"/lang/{lang}?next=/jobs")
        for size in ({"width": 1280, "height": 800}, PHONE):
            ui.page.set_viewport_size(size)
            page = ui.go("/jobs/badges?tab=record")
            expect(page.locator("#record-checks")).to_be_visible()
            lines = page.evaluate("""() => Array.from(document.querySelectorAll('#record-checks .badge'))
                .map(b => { const s = getComputedStyle(b);
                  const inner = b.getBoundingClientRect().height - parseFloat(s.paddingTop)
                                - parseFloat(s.paddingBottom);
                  return Math.round(inner / parseFloat(s.lineHeight === 'normal'
                      ? parseFloat(s.fontSize) * 1.45 : s.lineHeight) * 10) / 10; })""")
            assert len(lines) == 15 and max(lines) <= 1.2, (lang, size, lines)
    ui.go("/lang/en?next=/jobs")


def test_the_yaml_preview_keeps_long_lines_and_comments(ui):
    long = "echo " + "x" * 300 + " END"
    page = ui.go("/create")
    page.locator(".yaml-start summary").click()
    text = failing_job("longline").replace("runScript: echo never",
                                          f"runScript: {long}  # a comment at the end")
    page.fill("#yaml-text", "# my Job, as I keep it\n" + text)
    page.locator(".yaml-start button[type=submit]").click()
    expect(page.locator("#wizard")).to_have_attribute("data-step", "4")
    pre = page.locator("#yaml-preview")
    expect(pre).to_contain_text("# my Job, as I keep it")
    expect(pre).to_contain_text("# a comment at the end")
    # one line, not folded or wrapped: the preview scrolls to its end
    info = pre.evaluate("""p => {
        const r = p.getBoundingClientRect(), style = getComputedStyle(p);
        const line = p.textContent.split('\\n').find(l => l.includes(' END'));
        p.scrollLeft = p.scrollWidth;
        const range = document.createRange(), node = p.firstChild, at = node.textContent.indexOf(' END');
        range.setStart(node, at + 1); range.setEnd(node, at + 4);
        const end = range.getBoundingClientRect();
        return {whiteSpace: style.whiteSpace, scrolls: p.scrollWidth > p.clientWidth,
                whole: line.trim().startsWith('runScript: echo xxx'),
                endShown: end.left >= r.left && end.right <= r.right + 1};
    }""")
    assert info == {"whiteSpace": "pre", "scrolls": True, "whole": True, "endShown": True}, info
