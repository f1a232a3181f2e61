/// The dashboard's Mustache templates, compiled into the binary (an installed `tandem` is one file:
/// SwiftPM resource bundles would have to be installed beside it). `{{x}}` is HTML-escaped; the
/// only unescaped value is the layout's `{{{body}}}`, which is a rendered template.
///
/// The part of a page that live events refresh is `<div id="live">`; forms a person types into stay
/// outside it, so a refresh never eats what they typed.
enum WebTemplates {
    static let all: [(String, String)] = [
        ("layout", layout), ("friends", friends), ("challenges", challenges), ("ledger", ledger), ("focus", focus),
        ("vault", vault),
    ]

    static let layout = #"""
    <!doctype html>
    <html lang="en">
    <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>{{title}} · Tandem</title>
    <link rel="stylesheet" href="/static/dashboard.css">
    <script src="/static/dashboard.js" defer></script>
    </head>
    <body data-page="{{page}}">
    <a class="skip" href="#main">Skip to the content</a>
    <header class="top">
      <p class="brand"><span class="logo" aria-hidden="true"></span>Tandem{{#hasName}} <span class="me">· {{me.name}}</span>{{/hasName}}</p>
      <nav aria-label="Sections">
        <ul>{{#nav}}<li><a href="{{path}}"{{#current}} aria-current="page"{{/current}}>{{title}}</a></li>{{/nav}}</ul>
      </nav>
      <p class="live-state" id="live-state" role="status" aria-live="polite" data-state="static">Not live</p>
    </header>
    {{#hasFlash}}<div class="flash" role="status"><p>{{flash}}</p></div>{{/hasFlash}}
    {{#hasErrors}}<div class="flash error" role="alert">{{#errors}}<p>{{.}}</p>{{/errors}}</div>{{/hasErrors}}
    <main id="main" tabindex="-1">
    <h1>{{title}}</h1>
    {{{body}}}
    </main>
    <footer class="bottom">
      <p>Your ID <code>{{me.display}}</code></p>
      <form method="post" action="/logout"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit" class="quiet">Sign out</button></form>
    </footer>
    </body>
    </html>
    """#

    static let friends = #"""
    <div id="live">
    <section class="card" aria-labelledby="friends-h">
      <h2 id="friends-h">Friends <span class="count">{{onlineCount}} of {{friendCount}} online</span></h2>
      {{#hasFriends}}
      <ul class="people" id="friend-list">
        {{#friends}}
        <li class="person" data-id="{{id}}" data-online="{{#online}}yes{{/online}}{{^online}}no{{/online}}">
          <span class="dot {{stateClass}}" aria-hidden="true"></span>
          <span class="name">{{name}}</span>
          <span class="badge {{stateClass}}">{{stateText}}</span>
          <span class="meta">{{via}}{{seen}}</span>
        </li>
        {{/friends}}
      </ul>
      {{/hasFriends}}
      {{^hasFriends}}<p class="empty">No friends yet: add one with their ID below.</p>{{/hasFriends}}
    </section>
    <section class="card" aria-labelledby="requests-h">
      <h2 id="requests-h">Requests</h2>
      {{#hasReceived}}
      <ul class="people" id="received-requests">
        {{#received}}
        <li class="person" data-id="{{id}}">
          <span class="name">{{name}}</span> <span class="meta">wants to be your friend{{#hasMessage}}: “{{message}}”{{/hasMessage}}</span>
          <span class="actions">
            <form method="post" action="/friends/accept"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><button type="submit" class="primary" aria-label="Accept {{name}}">Accept</button></form>
            <form method="post" action="/friends/decline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><button type="submit" aria-label="Decline {{name}}">Decline</button></form>
          </span>
        </li>
        {{/received}}
      </ul>
      {{/hasReceived}}
      {{#hasSent}}
      <ul class="people" id="sent-requests">
        {{#sent}}<li class="person"><span class="name">{{name}}</span> <span class="meta">has not answered your request yet</span></li>{{/sent}}
      </ul>
      {{/hasSent}}
      {{^hasReceived}}{{^hasSent}}<p class="empty">No open requests.</p>{{/hasSent}}{{/hasReceived}}
    </section>
    </div>
    <section class="card" aria-labelledby="add-h">
      <h2 id="add-h">Add a friend</h2>
      <form method="post" action="/friends/request" class="stack" id="add-friend">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="friend-id">Their Tandem ID or share code</label>
        <input id="friend-id" name="id" required autocomplete="off" spellcheck="false" placeholder="tdm1…">
        <label for="friend-addr">Address <span class="hint">(optional, host:port, when they are not found on the LAN or a relay)</span></label>
        <input id="friend-addr" name="addr" autocomplete="off" spellcheck="false" placeholder="192.0.2.7:7777">
        <label for="friend-message">Message <span class="hint">(optional)</span></label>
        <input id="friend-message" name="message" maxlength="280">
        <button type="submit" class="primary">Send request</button>
      </form>
    </section>
    <section class="card" aria-labelledby="you-h">
      <h2 id="you-h">You</h2>
      <p>Give a friend your ID{{#me.share}} or share code{{/me.share}}:</p>
      <p><code class="id" id="my-id">{{me.id}}</code></p>
      {{#me.share}}<p><code class="id">{{me.share}}</code></p>{{/me.share}}
    </section>
    """#

    static let challenges = #"""
    <div id="live">
    {{#hasRunning}}
    <section class="card" aria-labelledby="running-h">
      <h2 id="running-h">Running now</h2>
      {{#running}}
      <article class="challenge running" data-id="{{id}}" aria-label="Challenge {{short}}">
        <p class="meta">{{minutes}} min{{#hasMessage}} · “{{message}}”{{/hasMessage}}</p>
        <ul class="rings">
          {{#participants}}
          <li class="ring-box{{#quit}} quit{{/quit}}">
            <svg class="ring" viewBox="0 0 120 120" width="120" height="120" role="img" aria-label="{{name}}: {{clock}} left, {{state}}"
                 data-remaining-ms="{{remainingMs}}" data-duration-ms="{{durationMs}}" data-frozen="{{#frozen}}yes{{/frozen}}{{^frozen}}no{{/frozen}}">
              <circle class="track" cx="60" cy="60" r="52"></circle>
              <circle class="arc" cx="60" cy="60" r="52" stroke-dasharray="{{ringLength}}" stroke-dashoffset="{{offset}}" transform="rotate(-90 60 60)"></circle>
              <text x="60" y="66" text-anchor="middle" class="ring-clock">{{clock}}</text>
            </svg>
            <p class="ring-name">{{name}}</p>
            <p class="ring-state">{{state}}{{#hasReason}}: “{{reason}}”{{/hasReason}}</p>
          </li>
          {{/participants}}
        </ul>
        <form method="post" action="/challenges/quit" class="inline">
          <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}">
          <label for="quit-reason-{{short}}">Reason <span class="hint">(optional, your friends see it)</span></label>
          <input id="quit-reason-{{short}}" name="reason" maxlength="140">
          <button type="submit" class="danger">Quit</button>
        </form>
      </article>
      {{/running}}
    </section>
    {{/hasRunning}}
    <section class="card" aria-labelledby="list-h">
      <h2 id="list-h">Challenges</h2>
      {{#hasOthers}}
      <ul class="challenge-list">
        {{#others}}
        <li class="challenge" data-id="{{id}}" data-phase="{{phase}}">
          <span class="badge phase-{{phase}}">{{phaseText}}</span>
          <span class="name">{{minutes}} min with {{names}}</span>
          {{#hasMessage}}<span class="meta">“{{message}}”</span>{{/hasMessage}}
          {{#hasStartsAt}}<span class="meta">starts {{startsAt}}</span>{{/hasStartsAt}}
          <span class="actions">
          {{#canAnswer}}
            <form method="post" action="/challenges/accept"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><button type="submit" class="primary">Accept</button></form>
            <form method="post" action="/challenges/decline"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><button type="submit">Decline</button></form>
          {{/canAnswer}}
          {{#canCancel}}
            <form method="post" action="/challenges/cancel"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><button type="submit">Cancel</button></form>
          {{/canCancel}}
          {{#canQuit}}
            <form method="post" action="/challenges/quit"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><button type="submit" class="danger">Quit</button></form>
          {{/canQuit}}
          </span>
        </li>
        {{/others}}
      </ul>
      {{/hasOthers}}
      {{^hasOthers}}<p class="empty">No other challenges.</p>{{/hasOthers}}
    </section>
    </div>
    <section class="card" aria-labelledby="invite-h">
      <h2 id="invite-h">Invite a friend</h2>
      {{#hasFriendOptions}}
      <form method="post" action="/challenges/invite" class="stack" id="invite">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="invite-friend">Friend</label>
        <select id="invite-friend" name="friend">{{#friendOptions}}<option value="{{id}}">{{name}}</option>{{/friendOptions}}</select>
        <label for="invite-minutes">Minutes</label>
        <input id="invite-minutes" name="minutes" type="number" min="1" max="1440" value="25" required>
        <label for="invite-message">Message <span class="hint">(optional)</span></label>
        <input id="invite-message" name="message" maxlength="280">
        <button type="submit" class="primary">Invite</button>
      </form>
      {{/hasFriendOptions}}
      {{^hasFriendOptions}}<p class="empty">Add a friend first.</p>{{/hasFriendOptions}}
    </section>
    """#

    static let ledger = #"""
    <div id="live">
    <section class="card" aria-labelledby="stats-h">
      <h2 id="stats-h">Your record</h2>
      <ul class="stats">
        {{#stats}}
        <li><span class="stat-label">Challenges completed</span> <span class="stat-value">{{completed}}</span></li>
        <li><span class="stat-label">Challenges failed</span> <span class="stat-value">{{failed}}</span></li>
        <li><span class="stat-label">Solo sessions</span> <span class="stat-value">{{solo}}</span></li>
        <li><span class="stat-label">Focused minutes</span> <span class="stat-value">{{minutes}}</span></li>
        <li><span class="stat-label">Streak (days)</span> <span class="stat-value">{{streak}}</span></li>
        <li><span class="stat-label">Longest streak</span> <span class="stat-value">{{longest}}</span></li>
        {{/stats}}
      </ul>
      {{#chart}}
      <figure class="chart">
        <svg viewBox="0 0 560 170" role="img" aria-label="{{summary}}" preserveAspectRatio="xMidYMid meet">
          <line class="axis" x1="0" y1="140.5" x2="560" y2="140.5"></line>
          {{#bars}}<rect class="bar" x="{{x}}" y="{{y}}" width="{{w}}" height="{{h}}"><title>{{title}}</title></rect><text class="day" x="{{lx}}" y="160" text-anchor="middle">{{label}}</text>{{/bars}}
        </svg>
        <figcaption>{{summary}} (scale: {{top}} min).</figcaption>
      </figure>
      {{/chart}}
    </section>
    <section class="card" aria-labelledby="entries-h">
      <h2 id="entries-h">Entries</h2>
      {{#hasEntries}}
      <div class="table-wrap">
      <table>
        <caption class="visually-hidden">Signed ledger entries, newest first</caption>
        <thead><tr><th scope="col">#</th><th scope="col">When</th><th scope="col">Length</th><th scope="col">Outcomes</th><th scope="col">Signed</th></tr></thead>
        <tbody>
        {{#entries}}
        <tr><td>{{seq}}</td><td>{{when}}</td><td>{{length}}</td>
          <td>{{#outcomes}}<span class="outcome{{#ok}} ok{{/ok}}">{{name}}: {{result}}{{#hasReason}} (“{{reason}}”){{/hasReason}}</span> {{/outcomes}}</td>
          <td>{{signers}} <code>{{hash}}</code></td></tr>
        {{/entries}}
        </tbody>
      </table>
      </div>
      {{/hasEntries}}
      {{^hasEntries}}<p class="empty">No entries yet: finish a challenge and it is signed into the ledger.</p>{{/hasEntries}}
    </section>
    </div>
    <section class="card" aria-labelledby="verify-h">
      <h2 id="verify-h">Verify</h2>
      <p>Checks every entry's signatures and the hash chain that links them.</p>
      <form method="post" action="/ledger/verify"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit" class="primary">Verify the ledger</button></form>
    </section>
    """#

    static let focus = #"""
    <div id="live">
    <section class="card" aria-labelledby="lock-h">
      <h2 id="lock-h">Lock</h2>
      {{#locked}}<p class="lock-state locked"><strong>Locked</strong>: mode {{lockedMode}}, {{hold}}.{{#hasTemporary}} Temporarily {{temporary}}.{{/hasTemporary}}</p>{{/locked}}
      {{^locked}}<p class="lock-state open"><strong>Unlocked.</strong> Nothing is blocked.</p>{{/locked}}
    </section>
    <section class="card" aria-labelledby="modes-h">
      <h2 id="modes-h">Modes</h2>
      {{#hasModes}}
      <ul class="modes">
        {{#modes}}
        <li class="mode{{#locked}} locked{{/locked}}">
          <span class="name">{{name}}</span>
          {{#locked}}<span class="badge locked">locked</span>{{/locked}}{{#active}}<span class="badge">active</span>{{/active}}
          <span class="meta">key: {{mainKey}}</span>
          {{#hasSites}}<span class="meta">sites: {{sites}}</span>{{/hasSites}}
          {{#hasApps}}<span class="meta">apps: {{apps}}</span>{{/hasApps}}
        </li>
        {{/modes}}
      </ul>
      {{/hasModes}}
      {{^hasModes}}<p class="empty">No modes yet (tandem mode create NAME).</p>{{/hasModes}}
    </section>
    </div>
    <section class="card" aria-labelledby="key-h">
      <h2 id="key-h">Show a key</h2>
      <h3>Unlock</h3>
      <form method="post" action="/focus/unlock" class="stack" id="unlock">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="unlock-tag">Tag text</label>
        <input id="unlock-tag" name="tag" type="password" required>
        <button type="submit" class="primary">Unlock</button>
      </form>
      {{#hasModes}}
      <h3>Lock a mode</h3>
      <form method="post" action="/focus/lock" class="stack" id="lock">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="lock-mode">Mode</label>
        <select id="lock-mode" name="mode">{{#modes}}<option value="{{name}}">{{name}}</option>{{/modes}}</select>
        <label for="lock-tag">Tag text</label>
        <input id="lock-tag" name="tag" type="password" required>
        <button type="submit">Lock</button>
      </form>
      {{/hasModes}}
    </section>
    {{> focus_keys}}
    """#
}
