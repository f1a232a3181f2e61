/// The vault page's template, styles and script (compiled in, like the rest: WebTemplates).
///
/// The PIN pad, the lock button and the upload form stay outside `#live` (a live refresh never eats what a person
/// typed); the lockout notice, the grid and the backups are inside it. When the vault opens or
/// locks, the script loads the page again (the PIN pad comes or goes).
extension WebTemplates {
    static let vault = #"""
    <script src="/static/vault.js" defer></script>
    {{^initialized}}
    <section class="card" aria-labelledby="novault-h">
      <h2 id="novault-h">No vault yet</h2>
      <p class="empty">Create one in a terminal with <code>tandem vault init</code>: it asks for a PIN (or a passphrase) and shows your recovery code.</p>
    </section>
    {{/initialized}}
    {{#locked}}
    <section class="card pin-card" aria-labelledby="pin-h">
      <h2 id="pin-h">The vault is locked</h2>
      <form method="post" action="/vault/unlock" class="pinpad" id="pinpad">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="pin">PIN or passphrase</label>
        <input id="pin" name="pin" type="password" autocapitalize="off" spellcheck="false" required>
        <div class="keys" role="group" aria-label="PIN pad">
          {{#keys}}<button type="button" class="key" data-key="{{key}}">{{key}}</button>{{/keys}}
          <button type="button" class="key" data-key="clear" aria-label="Clear">C</button>
          <button type="button" class="key" data-key="0">0</button>
          <button type="button" class="key" data-key="back" aria-label="Delete the last digit">⌫</button>
        </div>
        <button type="submit" class="primary" id="unlock">Open the vault</button>
      </form>
    </section>
    {{/locked}}
    {{#open}}
    <div class="vault-bar">
      <form method="post" action="/vault/lock" class="inline">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <button type="submit" class="danger" id="lock">Lock the vault</button>
        <span class="meta">{{autoLock}}</span>
      </form>
    </div>
    {{/open}}
    <div id="live">
    {{#locked}}
    <section class="attempts" aria-labelledby="attempts-h" id="attempts">
      <h2 id="attempts-h" class="visually-hidden">PIN attempts</h2>
      {{#lockedOut}}<p class="lockout" id="lockout" data-retry-ms="{{retryMs}}">Too many wrong PINs ({{failuresText}}): try again in <span class="wait">{{retryText}}</span>.</p>{{/lockedOut}}
      {{^lockedOut}}{{#hasFailures}}<p class="meta" id="failures">{{failuresText}}. After 3, each wrong one makes you wait longer.</p>{{/hasFailures}}{{/lockedOut}}
      {{^lockedOut}}{{^hasFailures}}<p class="meta">Type your PIN with the pad or the keyboard.</p>{{/hasFailures}}{{/lockedOut}}
    </section>
    {{/locked}}
    {{#open}}
    <section class="card" aria-labelledby="grid-h">
      <h2 id="grid-h">{{#inAlbum}}{{album}}{{/inAlbum}}{{^inAlbum}}Everything{{/inAlbum}} <span class="count">{{#inAlbum}}{{itemCount}} here · {{totalText}} in the vault{{/inAlbum}}{{^inAlbum}}{{totalText}}{{/inAlbum}}</span></h2>
      <nav aria-label="Albums" class="albums">
        <ul>
          <li><a href="/vault"{{#allCurrent}} aria-current="page"{{/allCurrent}}>Everything</a></li>
          {{#albums}}<li><a href="{{href}}"{{#current}} aria-current="page"{{/current}}>{{name}} <span class="count">{{items}}</span></a></li>{{/albums}}
        </ul>
      </nav>
      {{#hasItems}}
      <ul class="grid" id="vault-grid">
        {{#items}}
        <li class="tile" data-id="{{id}}">
          <a href="/vault/item/{{id}}" class="thumb-link">
            {{#thumb}}<img class="thumb" src="/vault/thumb/{{id}}" alt="{{name}}" width="150" height="150" decoding="async">{{/thumb}}
            {{^thumb}}<span class="thumb none"><span>{{type}}</span><span class="visually-hidden">: {{name}}</span></span>{{/thumb}}
          </a>
          <span class="tile-name" title="{{name}}">{{#favorite}}<span aria-label="favourite">★</span> {{/favorite}}{{name}}</span>
          <span class="meta">{{size}} · <a href="/vault/download/{{id}}" download aria-label="Download {{name}}">Download</a></span>
        </li>
        {{/items}}
      </ul>
      {{#cut}}<p class="meta">The newest 300 are shown; <code>tandem vault ls</code> lists all.</p>{{/cut}}
      {{/hasItems}}
      {{^hasItems}}<p class="empty">Nothing here yet: add photos above.</p>{{/hasItems}}
    </section>
    {{/open}}
    <section class="card" aria-labelledby="backups-h">
      <h2 id="backups-h">Backups at friends</h2>
      {{#hasHolders}}
      <ul class="people" id="backup-holders">
        {{#holders}}
        <li class="person holder" data-id="{{id}}">
          <span class="name">{{name}}</span>
          <span class="meta">holds up to {{quota}} · {{lastPush}}{{#pending}} · a push is waiting for them to be online{{/pending}}</span>
          {{#pushing}}
          <span class="push-progress"><label for="push-{{id}}">Pushing to {{name}}</label>
            <progress id="push-{{id}}" data-holder="{{id}}" max="{{total}}" value="{{done}}">{{progressText}}</progress>
            <span class="meta push-text" data-holder="{{id}}">{{progressText}}</span></span>
          {{/pushing}}
          <span class="actions">
            <form method="post" action="/vault/backup/push"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="to" value="{{id}}"><button type="submit" aria-label="Push a backup to {{name}}"{{#pushing}} disabled{{/pushing}}>Push now</button></form>
          </span>
        </li>
        {{/holders}}
      </ul>
      {{/hasHolders}}
      {{^hasHolders}}<p class="empty">No friend holds your backups yet. A friend offers space with <code>tandem backup offer YOUR-ID --quota 10GiB</code>.</p>{{/hasHolders}}
    </section>
    </div>
    {{#open}}
    <section class="card vault-tools" aria-labelledby="add-h">
      <h2 id="add-h">Add to the vault <span class="hint">up to 64 MiB at a time; GPS and camera data are removed from photos</span></h2>
      <form method="post" action="/vault/upload" enctype="multipart/form-data" class="inline upload" id="upload-form">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="upload-file">Photos or files</label>
        <input id="upload-file" name="file" type="file" multiple required>
        <label for="upload-album">Album</label>
        <input id="upload-album" name="album" type="text" value="{{album}}" maxlength="100" list="album-names" placeholder="optional">
        <datalist id="album-names">{{#albums}}<option value="{{name}}"></option>{{/albums}}</datalist>
        <button type="submit" class="primary" id="upload">Add</button>
      </form>
    </section>
    {{/open}}
    """#
}

/// The vault page's styles (served inside dashboard.css) and its script.
enum WebVaultAssets {
    static let css = #"""

    /* The vault page */
    .pinpad { display: grid; gap: .5em; max-width: 16rem; }
    .pinpad input[type="password"] { font-size: 1.3em; letter-spacing: .2em; text-align: center; }
    .keys { display: grid; grid-template-columns: repeat(3, 1fr); gap: .45em; }
    .keys .key { font-size: 1.25em; padding: .55em 0; min-height: 2.8em; }
    .lockout { margin: 0; background: #fdecec; border: 1px solid #f1b0b0; border-radius: 8px; padding: .6em .9em; color: #8a1116; }
    .vault-bar { display: flex; justify-content: flex-end; margin: -.4em 0 .8em; }
    .attempts { margin: 0 0 1em; }
    .attempts p { margin: 0; }
    form.upload { gap: .5em .7em; }
    form.upload input[type="file"] { max-width: 100%; }
    .albums ul { list-style: none; display: flex; flex-wrap: wrap; gap: .3em; margin: 0 0 .8em; padding: 0; }
    .albums a { display: block; padding: .25em .65em; border: 1px solid var(--line); border-radius: 999px; text-decoration: none; color: var(--ink); }
    .albums a[aria-current="page"] { background: var(--accent); border-color: var(--accent); color: var(--accent-ink); }
    .albums a[aria-current="page"] .count { color: inherit; }
    ul.grid { list-style: none; display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: .8em; margin: 0; padding: 0; }
    .tile { display: grid; gap: .2em; min-width: 0; }
    .thumb-link { display: block; }
    .thumb { display: block; width: 100%; height: auto; aspect-ratio: 1 / 1; object-fit: cover; border-radius: 8px; background: #eef1f4; }
    .thumb.none { display: flex; align-items: center; justify-content: center; color: var(--muted); text-transform: uppercase; font-size: .85em; }
    .tile-name { font-size: .9em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
    .push-progress { display: flex; flex-wrap: wrap; align-items: center; gap: .4em; width: 100%; }
    .push-progress label { font-size: .9em; }
    .push-progress progress { flex: 1 1 8em; height: .9em; }
    @media (max-width: 600px) {
      ul.grid { grid-template-columns: repeat(auto-fill, minmax(100px, 1fr)); gap: .5em; }
    }
    """#

    static let js = #"""
    (function () {
      "use strict";
      // The PIN pad: each key types into the field (the field works without it, and without JS).
      document.querySelectorAll("#pinpad button.key").forEach(function (b) {
        b.addEventListener("click", function () {
          var pin = document.getElementById("pin");
          if (!pin) return;
          var k = b.dataset.key;
          if (k === "back") pin.value = pin.value.slice(0, -1);
          else if (k === "clear") pin.value = "";
          else pin.value += k;
        });
      });

      // The lockout's remaining wait, counted down (the notice is redrawn by live refreshes).
      function countdown() {
        var el = document.getElementById("lockout");
        if (!el) return;
        if (!el.dataset.deadline) el.dataset.deadline = String(Date.now() + (Number(el.dataset.retryMs) || 0));
        var left = Math.max(0, Number(el.dataset.deadline) - Date.now()), s = Math.ceil(left / 1000);
        var wait = el.querySelector(".wait");
        if (left <= 0) { el.textContent = "You can try again now."; return; }
        if (wait) wait.textContent = s < 60 ? s + " s" : Math.ceil(s / 60) + " min";
      }
      setInterval(countdown, 500);
      countdown();

      // Events from the page's one stream (dashboard.js): push progress in place; open/lock reloads
      // (unless this page is leaving through one of its own forms: that answer is the next page).
      var opened = document.getElementById("pinpad") === null, leaving = false;
      document.addEventListener("submit", function () { leaving = true; });
      document.addEventListener("tandem:event", function (e) {
        var ev;
        try { ev = JSON.parse(e.detail); } catch (err) { return; }
        var f = ev.fields || {};
        if (!leaving && ((ev.type === "vault.locked" && opened) || (ev.type === "vault.unlocked" && !opened))) {
          location.replace("/vault" + location.search);
          return;
        }
        if (ev.type === "backup.push.progress" && f.to) {
          document.querySelectorAll("progress[data-holder]").forEach(function (p) {
            if (p.dataset.holder !== f.to) return;
            p.max = Math.max(1, Number(f.total) || 1);
            p.value = Number(f.done) || 0;
            p.textContent = Math.round(100 * p.value / p.max) + "%";
          });
          document.querySelectorAll(".push-text[data-holder]").forEach(function (t) {
            if (t.dataset.holder === f.to) t.textContent = Math.round(100 * (Number(f.done) || 0) / Math.max(1, Number(f.total) || 1)) + "%";
          });
        }
      });
    })();
    """#
}
