/// The dashboard's one style sheet and its one small script (no framework, no build step),
/// compiled in like the templates.
enum WebAssets {
    static let css = #"""
    :root {
      --bg: #f4f5f7; --card: #ffffff; --ink: #1c2430; --muted: #4b5563; --line: #d9dde3;
      --accent: #0b6b63; --accent-ink: #ffffff; --on: #166534; --on-bg: #dcfce7; --off: #374151; --off-bg: #e5e7eb;
      --danger: #a4161a; --ring-track: #e3e7ec; --ring: #0b6b63; --ring-quit: #9ca3af;
      font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif;
      color: var(--ink); background: var(--bg);
    }
    * { box-sizing: border-box; }
    body { margin: 0; line-height: 1.45; }
    a { color: var(--accent); }
    code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .92em; }
    code.id { display: inline-block; max-width: 100%; overflow-wrap: anywhere; background: #eef1f4; padding: .15em .4em; border-radius: 4px; }
    .skip { position: absolute; left: -999px; top: 0; background: var(--card); padding: .5em 1em; }
    .skip:focus { left: .5em; z-index: 10; }
    .visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }

    header.top { display: flex; flex-wrap: wrap; align-items: center; gap: .5em 1.5em; padding: .6em 1.5em;
      background: var(--card); border-bottom: 1px solid var(--line); }
    .brand { margin: 0; font-weight: 700; font-size: 1.1em; display: flex; align-items: center; gap: .45em; }
    .brand .me { font-weight: 400; color: var(--muted); }
    .logo { width: 1.1em; height: 1.1em; border-radius: 50%; border: .22em solid var(--accent); display: inline-block; }
    nav ul { list-style: none; display: flex; flex-wrap: wrap; gap: .25em; margin: 0; padding: 0; }
    nav a { display: block; padding: .35em .75em; border-radius: 6px; text-decoration: none; color: var(--ink); }
    nav a:hover { background: #eef1f4; }
    nav a[aria-current="page"] { background: var(--accent); color: var(--accent-ink); }
    .live-state { margin: 0 0 0 auto; font-size: .85em; color: var(--muted); }
    .live-state::before { content: ""; display: inline-block; width: .6em; height: .6em; border-radius: 50%; background: #9ca3af; margin-right: .4em; }
    .live-state[data-state="live"]::before { background: #16a34a; }

    main { max-width: 60rem; margin: 0 auto; padding: 1em 1.5em 2em; }
    main:focus { outline: none; }
    h1 { font-size: 1.6em; margin: .4em 0 .6em; }
    h2 { font-size: 1.15em; margin: 0 0 .6em; display: flex; align-items: baseline; gap: .6em; flex-wrap: wrap; }
    .count { font-size: .8em; font-weight: 400; color: var(--muted); }
    .card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 1em 1.2em; margin: 0 0 1em; }
    .empty { color: var(--muted); margin: 0; }
    .hint { color: var(--muted); font-weight: 400; font-size: .9em; }
    .flash { max-width: 60rem; margin: 1em auto 0; padding: 0 1.5em; }
    .flash p { margin: 0; background: #e6f4f1; border: 1px solid #9fd3c9; border-radius: 8px; padding: .6em .9em; }
    .flash.error p { background: #fdecec; border-color: #f1b0b0; }

    ul.people, ul.challenge-list, ul.modes { list-style: none; margin: 0; padding: 0; }
    .person, .challenge, .mode { display: flex; flex-wrap: wrap; align-items: center; gap: .3em .7em; padding: .55em 0; border-top: 1px solid var(--line); }
    .person:first-child, .challenge:first-child, .mode:first-child { border-top: 0; }
    .name { font-weight: 600; }
    .meta { color: var(--muted); font-size: .9em; }
    .dot { width: .7em; height: .7em; border-radius: 50%; background: #9ca3af; }
    .dot.on { background: #16a34a; }
    .badge { font-size: .8em; padding: .1em .55em; border-radius: 999px; background: var(--off-bg); color: var(--off); }
    .badge.on { background: var(--on-bg); color: var(--on); }
    .badge.locked { background: #fdecec; color: #8a1116; }
    h3 { font-size: 1em; margin: .8em 0 .4em; }
    .actions { margin-left: auto; display: flex; gap: .4em; }
    .actions form, form.inline { display: inline-flex; gap: .4em; align-items: center; flex-wrap: wrap; margin: 0; }

    form.stack { display: grid; gap: .35em; max-width: 32rem; margin: 0 0 1em; }
    form.stack button { justify-self: start; margin-top: .4em; }
    input, select { font: inherit; padding: .45em .55em; border: 1px solid #8a94a3; border-radius: 6px; background: #fff; color: var(--ink); min-width: 0; }
    input:focus, select:focus, button:focus, a:focus { outline: 3px solid #f59e0b; outline-offset: 1px; }
    button { font: inherit; padding: .42em .9em; border-radius: 6px; border: 1px solid #8a94a3; background: #fff; color: var(--ink); cursor: pointer; }
    button.primary { background: var(--accent); border-color: var(--accent); color: var(--accent-ink); }
    button.danger { background: var(--danger); border-color: var(--danger); color: #fff; }
    button.quiet { border: 0; background: none; color: var(--accent); text-decoration: underline; padding: 0; }

    .rings { list-style: none; display: flex; flex-wrap: wrap; gap: 1.2em; padding: 0; margin: .4em 0 1em; }
    .ring-box { text-align: center; }
    .ring-box p { margin: .2em 0 0; }
    .ring-name { font-weight: 600; }
    .ring-state { color: var(--muted); font-size: .9em; }
    .ring .track { fill: none; stroke: var(--ring-track); stroke-width: 10; }
    .ring .arc { fill: none; stroke: var(--ring); stroke-width: 10; stroke-linecap: round; transition: stroke-dashoffset .9s linear; }
    .ring-box.quit .arc { stroke: var(--ring-quit); }
    .ring-clock { font-size: 20px; font-weight: 700; fill: var(--ink); font-variant-numeric: tabular-nums; }
    .challenge.running { border: 0; display: block; padding: 0; }
    .challenge.running > .meta { margin: 0; }

    ul.stats { list-style: none; padding: 0; display: grid; grid-template-columns: repeat(3, 1fr); gap: .8em; margin: 0; }
    ul.stats li { background: #f7f8fa; border-radius: 8px; padding: .6em .8em; display: flex; flex-direction: column; }
    .stat-label { color: var(--muted); font-size: .85em; }
    .stat-value { font-size: 1.4em; font-weight: 700; }
    .chart { margin: 1em 0 0; }
    .chart svg { width: 100%; max-width: 560px; height: auto; display: block; }
    .chart .bar { fill: var(--accent); }
    .chart .axis { stroke: #8a94a3; stroke-width: 1; }
    .chart .day { font-size: 11px; fill: var(--muted); }
    .chart figcaption { color: var(--muted); font-size: .85em; margin-top: .3em; }
    .table-wrap { overflow-x: auto; }
    table { border-collapse: collapse; width: 100%; font-size: .95em; }
    th, td { text-align: left; padding: .45em .5em; border-top: 1px solid var(--line); vertical-align: top; }
    th { color: var(--muted); font-weight: 600; border-top: 0; }
    .outcome { white-space: nowrap; }
    .outcome.ok { color: var(--on); }
    .lock-state { margin: 0; padding: .6em .8em; border-radius: 8px; }
    .lock-state.locked { background: #fdecec; }
    .lock-state.open { background: var(--on-bg); }

    footer.bottom { max-width: 60rem; margin: 0 auto; padding: 0 1.5em 2em; display: flex; flex-wrap: wrap; gap: .5em 1.5em; align-items: center; color: var(--muted); font-size: .9em; }
    footer.bottom p { margin: 0; overflow-wrap: anywhere; }
    .notice-page { max-width: 40rem; margin: 3em auto; background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 1em 1.5em; }

    @media (max-width: 600px) {
      header.top { padding: .5em .8em; }
      .live-state { margin-left: 0; }
      main { padding: .5em .8em 1.5em; }
      .card { padding: .8em .9em; }
      .actions { margin-left: 0; }
      ul.stats { grid-template-columns: repeat(2, 1fr); }
      .flash { padding: 0 .8em; }
      footer.bottom { padding: 0 .8em 1.5em; }
    }
    @media (prefers-reduced-motion: reduce) { .ring .arc { transition: none; } }
    """#

    /// Live updates: the node's events arrive over one EventSource; on each, the page's live part
    /// (`#live`) is fetched again and swapped in (debounced). When the stream opens (first or again
    /// after a drop) the live part is fetched once before the page says "Live": an event that came
    /// between the page's rendering and the stream's opening (a short backup push finishing) is
    /// not missed. Countdown rings tick locally from the remaining time the server rendered.
    /// Without the script the pages still read and post.
    static let js = #"""
    (function () {
      "use strict";
      var state = document.getElementById("live-state");
      var ringLength = 2 * Math.PI * 52;
      var renderedAt = Date.now();
      var timer = null;
      var inflight = false, again = false;

      function setState(live) {
        if (!state) return;
        state.dataset.state = live ? "live" : "static";
        state.textContent = live ? "Live" : "Reconnecting…";
      }

      function clock(ms) {
        var s = Math.max(0, Math.floor(ms / 1000)), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
        var mm = (h > 0 && m < 10 ? "0" : "") + m, ss = (sec < 10 ? "0" : "") + sec;
        return (h > 0 ? h + ":" : "") + mm + ":" + ss;
      }

      function tick() {
        var now = Date.now();
        document.querySelectorAll("svg.ring").forEach(function (svg) {
          var duration = Number(svg.dataset.durationMs) || 1;
          var left = Number(svg.dataset.remainingMs) || 0;
          if (svg.dataset.frozen !== "yes") left = Math.max(0, left - (now - renderedAt));
          var arc = svg.querySelector(".arc"), text = svg.querySelector(".ring-clock");
          if (arc) arc.setAttribute("stroke-dashoffset", (ringLength * (1 - left / duration)).toFixed(2));
          if (text) text.textContent = clock(left);
        });
      }

      // `caughtUp`: the catch-up fetch when the stream opens (not counted as a live refresh in
      // `data-refreshed`), called once it is done either way.
      function refresh(caughtUp) {
        if (inflight) { again = true; if (caughtUp) caughtUp(); return; }
        inflight = true;
        fetch(location.pathname + location.search, { credentials: "same-origin", headers: { "X-Tandem-Live": "1" } })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) {
            if (!html) return;
            var doc = new DOMParser().parseFromString(html, "text/html");
            var fresh = doc.getElementById("live"), current = document.getElementById("live");
            // Nothing changed (a catch-up after a quiet moment): nothing swapped, so what a person
            // (or a test) holds on the page stays as it is.
            if (fresh && current && fresh.innerHTML !== current.innerHTML) {
              current.replaceWith(document.importNode(fresh, true));
              renderedAt = Date.now();
              tick();
              bottom();
              if (!caughtUp) document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
            }
          })
          .catch(function () {})
          .then(function () {
            inflight = false;
            if (caughtUp) caughtUp();
            if (again) { again = false; schedule(); }
          });
      }

      function schedule() {
        if (timer) return;
        timer = setTimeout(function () { timer = null; refresh(); }, 150);
      }

      // The browser reconnects a dropped stream by itself, but gives up on one it could not open
      // at all (a refused request, an error status): then the page opens a new one, backing off
      // from 2 s to a minute, so "Reconnecting…" is true.
      var retryMs = 2000;
      function connect() {
        var source = new EventSource("/events");
        source.onopen = function () { retryMs = 2000; refresh(function () { setState(true); }); };
        source.onerror = function () {
          setState(false);
          if (source.readyState === 2) {  // EventSource.CLOSED
            setTimeout(connect, retryMs);
            retryMs = Math.min(60000, retryMs * 2);
          }
        };
        source.addEventListener("node", function (e) {
          var type = "";
          try { type = JSON.parse(e.data).type || ""; } catch (err) { return; }
          document.body.dataset.lastEvent = type;
          // A page's own script may follow an event too (the vault page's push progress).
          document.dispatchEvent(new CustomEvent("tandem:event", { detail: e.data }));
          if (type.indexOf("web.") === 0 || /\.progress$/.test(type)) return;
          schedule();
        });
      }
      if (window.EventSource) connect();
      // A conversation opens at its newest message.
      function bottom() {
        var list = document.getElementById("message-list");
        if (list && list.lastElementChild) list.lastElementChild.scrollIntoView({ block: "nearest" });
      }
      setInterval(tick, 1000);
      tick();
      bottom();
    })();
    """#
}
