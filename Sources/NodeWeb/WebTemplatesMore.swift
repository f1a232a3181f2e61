/// Templates of the pages added after the first four (Messages, Bedtime, Health) and the Focus
/// page's key forms (`focus_keys`, a partial of `focus`). Same rules as `WebTemplates`: `{{x}}` is
/// escaped, live parts in `<div id="live">`, forms a person types into outside it.
enum WebTemplatesMore {
    static let all: [(String, String)] = [
        ("messages", messages), ("bedtime", bedtime), ("health", health), ("focus_keys", focusKeys),
    ]

    static let messages = #"""
    {{#hasConversation}}
    <p><a href="/messages">← All conversations</a></p>
    <div id="live">
    <section class="card" aria-labelledby="conv-h">
      <h2 id="conv-h">With {{with.name}} <span class="count">{{with.stateText}}</span></h2>
      {{#hasMessages}}
      <ol class="messages" id="message-list" aria-label="Messages with {{with.name}}, oldest first">
        {{#messages}}
        <li class="msg{{#me}} mine{{/me}}{{^me}} theirs{{/me}}" data-id="{{id}}" data-state="{{state}}">
          <p class="msg-meta"><span class="who">{{who}}</span> <time datetime="{{sentAtISO}}">{{sentAt}}</time>{{#me}} <span class="receipt" data-receipt="{{state}}">{{stateText}}</span>{{/me}}</p>
          {{#hasReply}}<p class="msg-reply">↪ a reply to {{replyTo}}</p>{{/hasReply}}
          <p class="msg-text">{{#retracted}}<em>(message retracted)</em>{{/retracted}}{{^retracted}}{{text}}{{/retracted}}</p>
          {{#hasFile}}<p class="meta">{{file}}</p>{{/hasFile}}
          {{#hasReactions}}<p class="reactions" aria-label="Reactions">{{#reactions}}<span class="reaction" title="{{by}}">{{emoji}}</span> {{/reactions}}</p>{{/hasReactions}}
          {{^retracted}}
          <form method="post" action="/messages/react" class="react"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><input type="hidden" name="friend" value="{{with.id}}"><input type="hidden" name="emoji" value="👍"><button type="submit" class="quiet" aria-label="React with a thumbs up to the message of {{sentAt}}">👍</button></form>
          {{/retracted}}
        </li>
        {{/messages}}
      </ol>
      {{/hasMessages}}
      {{^hasMessages}}<p class="empty">No messages yet: say hello below.</p>{{/hasMessages}}
    </section>
    </div>
    <section class="card" aria-labelledby="send-h">
      <h2 id="send-h">Send</h2>
      <form method="post" action="/messages/send" class="stack" id="send-message">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <input type="hidden" name="to" value="{{with.id}}">
        <label for="message-text">Message to {{with.name}}</label>
        <textarea id="message-text" name="text" rows="3" maxlength="16384" required></textarea>
        <button type="submit" class="primary">Send</button>
      </form>
    </section>
    {{/hasConversation}}
    {{^hasConversation}}
    <div id="live">
    <section class="card" aria-labelledby="inbox-h">
      <h2 id="inbox-h">Conversations <span class="count">{{unreadText}}</span></h2>
      {{#hasInbox}}
      <ul class="people" id="conversations">
        {{#inbox}}
        <li class="person conversation" data-id="{{id}}" data-unread="{{unread}}">
          <a class="name" href="/messages?with={{id}}">{{name}}</a>
          {{#hasUnread}}<span class="badge unread" aria-label="{{unread}} unread">{{unread}} new</span>{{/hasUnread}}
          <span class="meta">{{preview}}</span>
          <span class="meta">{{when}}</span>
        </li>
        {{/inbox}}
      </ul>
      {{/hasInbox}}
      {{^hasInbox}}<p class="empty">No friends to write to yet: add one on the Friends page.</p>{{/hasInbox}}
    </section>
    </div>
    {{/hasConversation}}
    """#

    static let bedtime = #"""
    <div id="live">
    <section class="card" aria-labelledby="night-h">
      <h2 id="night-h">Tonight</h2>
      {{#enabled}}
      {{#locked}}<p class="lock-state locked" id="bedtime-state"><strong>Locked for the night</strong>: mode {{mode}}. {{opensSentence}}.</p>{{/locked}}
      {{^locked}}<p class="lock-state open" id="bedtime-state"><strong>Not locked.</strong> Next bed time {{nextBed}}; then {{opens}}.</p>{{/locked}}
      <ul class="stats">
        <li><span class="stat-label">Bed</span> <span class="stat-value">{{bed}}</span></li>
        <li><span class="stat-label">Wake</span> <span class="stat-value">{{wake}}</span></li>
        <li><span class="stat-label">Unlocking possible from</span> <span class="stat-value" id="opens-at">{{opensAt}}</span></li>
      </ul>
      {{^modeExists}}<p class="flash error">Mode {{mode}} does not exist any more: set bedtime again.</p>{{/modeExists}}
      {{/enabled}}
      {{^enabled}}<p class="empty" id="bedtime-state">No bedtime is set. Choose a mode and your hours below.</p>{{/enabled}}
    </section>
    <section class="card" aria-labelledby="sun-h">
      <h2 id="sun-h">The sun today{{#place}} in {{name}}{{/place}}</h2>
      {{#hasSun}}
      <ul class="stats" id="sun-times">
        <li><span class="stat-label">Civil dawn</span> <span class="stat-value">{{sun.dawn}}</span></li>
        <li><span class="stat-label">Sunrise</span> <span class="stat-value">{{sun.sunrise}}</span></li>
        <li><span class="stat-label">Sunset</span> <span class="stat-value">{{sun.sunset}}</span></li>
      </ul>
      <p class="meta">Local time at the place ({{sun.zone}}), {{sun.date}}.{{#sun.hasPolar}} {{sun.polar}}{{/sun.hasPolar}}</p>
      {{/hasSun}}
      {{^hasSun}}<p class="empty">No place is set: sunrise counts as 07:00.</p>{{/hasSun}}
    </section>
    </div>
    <section class="card" aria-labelledby="leave-h">
      <h2 id="leave-h">Leave bedtime</h2>
      <p>After sunrise and your wake time, a photo of the daylight sky taken in the last 10 minutes opens the lock.</p>
      <form method="post" action="/bedtime/daylight" enctype="multipart/form-data" class="stack" id="daylight">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="daylight-photo">Photo of the sky (JPEG, PNG or HEIC)</label>
        <input id="daylight-photo" name="photo" type="file" accept="image/jpeg,image/png,image/heic" required>
        <button type="submit" class="primary">Check the photo and unlock</button>
      </form>
      <form method="post" action="/bedtime/emergency" class="inline">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <button type="submit" class="danger">Emergency unlock (costs 20 health)</button>
      </form>
    </section>
    <section class="card" aria-labelledby="set-h">
      <h2 id="set-h">Settings</h2>
      {{#hasModes}}
      <form method="post" action="/bedtime/set" class="stack" id="bedtime-set">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="bedtime-mode">Mode to lock at night</label>
        <select id="bedtime-mode" name="mode">{{#modes}}<option value="{{name}}"{{#selected}} selected{{/selected}}>{{name}}</option>{{/modes}}</select>
        <label for="bedtime-bed">Bed time</label>
        <input id="bedtime-bed" name="bed" type="time" value="{{form.bed}}" required>
        <label for="bedtime-wake">Wake time</label>
        <input id="bedtime-wake" name="wake" type="time" value="{{form.wake}}" required>
        <label for="bedtime-city">City <span class="hint">(from the built-in table; or give a location below)</span></label>
        <input id="bedtime-city" name="city" value="{{form.city}}" autocomplete="off">
        <label for="bedtime-location">Location <span class="hint">(optional: latitude,longitude in degrees)</span></label>
        <input id="bedtime-location" name="location" value="{{form.location}}" autocomplete="off" placeholder="59.91,10.75">
        <label for="bedtime-tz">Time zone <span class="hint">(optional, e.g. Europe/Oslo)</span></label>
        <input id="bedtime-tz" name="time_zone" value="{{form.zone}}" autocomplete="off">
        <button type="submit" class="primary">Save bedtime</button>
      </form>
      {{/hasModes}}
      {{^hasModes}}<p class="empty">Create a mode first (Focus page, or tandem mode create NAME).</p>{{/hasModes}}
      {{#enabled}}
      <form method="post" action="/bedtime/off" class="inline"><input type="hidden" name="csrf" value="{{csrf}}"><button type="submit">Switch bedtime off</button></form>
      {{/enabled}}
    </section>
    """#

    static let health = #"""
    <div id="live">
    <section class="card" aria-labelledby="health-h">
      <h2 id="health-h">Today</h2>
      <p class="health-line"><label for="health-meter">Health</label>
        <meter id="health-meter" min="0" max="100" low="25" high="60" optimum="100" value="{{health}}">{{health}} of 100</meter>
        <strong id="health-value">{{health}}</strong> <span class="badge state-{{state}}" id="health-state">{{state}}</span></p>
      <ul class="stats">
        <li><span class="stat-label">Cooldown left</span> <span class="stat-value" id="cooldown-left">{{cooldownLeft}}</span></li>
        <li><span class="stat-label">Cooldown after a bypass</span> <span class="stat-value">{{cooldownMinutes}} min</span></li>
        <li><span class="stat-label">Back to 100</span> <span class="stat-value">{{resetsAt}}</span></li>
      </ul>
    </section>
    <section class="card" aria-labelledby="bypass-h">
      <h2 id="bypass-h">Bypasses today</h2>
      {{#hasBypasses}}
      <ul class="people" id="bypasses">{{#bypasses}}<li class="person"><span class="name">{{kind}}</span> <span class="meta">{{at}}</span> <span class="badge">−{{cost}}</span></li>{{/bypasses}}</ul>
      {{/hasBypasses}}
      {{^hasBypasses}}<p class="empty">None today.</p>{{/hasBypasses}}
    </section>
    <section class="card" aria-labelledby="timeline-h">
      <h2 id="timeline-h">The day <span class="count">{{date}}</span></h2>
      {{#hasTimeline}}
      <ol class="timeline" id="timeline">
        {{#timeline}}<li class="tone-{{tone}}"><time>{{clock}}</time> <span class="line">{{line}}</span> <span class="meta">health {{health}}</span></li>{{/timeline}}
      </ol>
      {{#hasSummary}}<p class="meta">{{summary}}</p>{{/hasSummary}}
      {{/hasTimeline}}
      {{^hasTimeline}}<p class="empty">Nothing yet today.</p>{{/hasTimeline}}
    </section>
    </div>
    <section class="card" aria-labelledby="cooldown-h">
      <h2 id="cooldown-h">Cooldown</h2>
      <form method="post" action="/health/cooldown" class="stack" id="cooldown">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="cooldown-minutes">Minutes of cooldown after a bypass</label>
        <select id="cooldown-minutes" name="minutes">{{#cooldownChoices}}<option value="{{minutes}}"{{#selected}} selected{{/selected}}>{{minutes}}</option>{{/cooldownChoices}}</select>
        <button type="submit">Save</button>
      </form>
    </section>
    """#

    /// The Focus page's key forms: unlock (or open temporary items) with a QR image or a key file,
    /// the keys and their roles, and a new temporary key.
    static let focusKeys = #"""
    <section class="card" aria-labelledby="upload-h">
      <h2 id="upload-h">Show a key as a file</h2>
      <form method="post" action="/focus/key-upload" enctype="multipart/form-data" class="stack" id="key-upload">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="upload-action">What to do</label>
        <select id="upload-action" name="action">
          <option value="unlock">Unlock the locked mode (main key)</option>
          <option value="temp_unlock">Open the temporary items (temporary key)</option>
          <option value="lock">Lock a mode (main key)</option>
        </select>
        {{#hasModes}}
        <label for="upload-mode">Mode to lock <span class="hint">(when locking)</span></label>
        <select id="upload-mode" name="mode">{{#modes}}<option value="{{name}}">{{name}}</option>{{/modes}}</select>
        {{/hasModes}}
        <label for="upload-qr">A photo of the key's QR code <span class="hint">(JPEG, PNG or HEIC)</span></label>
        <input id="upload-qr" name="qr" type="file" accept="image/jpeg,image/png,image/heic">
        <label for="upload-keyfile">Or a key file <span class="hint">(a file holding the tag's payload, at most 4 KiB)</span></label>
        <input id="upload-keyfile" name="keyfile" type="file">
        <button type="submit" class="primary">Show the key</button>
      </form>
      <h3>Temporary unlock with a typed tag</h3>
      <form method="post" action="/focus/temp-unlock" class="stack" id="temp-unlock">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="temp-tag">Temporary key's tag text</label>
        <input id="temp-tag" name="tag" type="password" required>
        <button type="submit">Open the temporary items</button>
      </form>
    </section>
    <section class="card" aria-labelledby="keys-h">
      <h2 id="keys-h">Keys</h2>
      {{#hasKeys}}
      <ul class="modes" id="key-list">
        {{#keys}}<li class="mode" data-key="{{id}}"><span class="name">{{name}}</span> <span class="badge">{{kind}}</span>{{#hasMain}} <span class="meta">main key of {{main}}</span>{{/hasMain}}{{#hasTemp}} <span class="meta">temporary key of {{temp}}</span>{{/hasTemp}}{{^usable}} <span class="badge locked">unusable</span>{{/usable}}</li>{{/keys}}
      </ul>
      {{/hasKeys}}
      {{^hasKeys}}<p class="empty">No keys yet (tandem key enroll NAME --tag TEXT).</p>{{/hasKeys}}
      {{#hasModes}}
      <h3>New temporary key</h3>
      <form method="post" action="/focus/temp-key" class="stack" id="temp-key">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="temp-key-name">Name</label>
        <input id="temp-key-name" name="name" required maxlength="64" autocomplete="off">
        <label for="temp-key-mode">For mode <span class="hint">(not while it is locked)</span></label>
        <select id="temp-key-mode" name="mode">{{#modes}}<option value="{{name}}">{{name}}</option>{{/modes}}</select>
        <label for="temp-key-tag">Tag text</label>
        <input id="temp-key-tag" name="tag" type="password" required>
        <button type="submit">Enrol the temporary key</button>
      </form>
      {{/hasModes}}
    </section>
    """#

    static let css = #"""
    ol.messages { list-style: none; margin: 0; padding: 0; display: flex; flex-direction: column; gap: .5em; }
    .msg { max-width: 85%; padding: .45em .75em; border-radius: 10px; background: #eef1f4; }
    .msg.mine { align-self: flex-end; background: #e6f4f1; }
    .msg p { margin: 0; }
    .msg-meta { font-size: .8em; color: var(--muted); }
    .msg-text { white-space: pre-wrap; overflow-wrap: anywhere; }
    .msg-reply { font-size: .85em; color: var(--muted); }
    .receipt { font-weight: 600; }
    .reactions { font-size: 1.1em; }
    form.react { display: inline; margin: 0; }
    .badge.unread { background: var(--accent); color: var(--accent-ink); }
    textarea { font: inherit; padding: .45em .55em; border: 1px solid #8a94a3; border-radius: 6px; background: #fff; color: var(--ink); }
    textarea:focus { outline: 3px solid #f59e0b; outline-offset: 1px; }
    .health-line { display: flex; align-items: center; gap: .6em; flex-wrap: wrap; margin: 0 0 .8em; }
    meter { width: 14em; height: 1.2em; }
    .badge.state-tired, .badge.state-weak { background: #fff4d6; color: #6b4500; }
    .badge.state-dead { background: #fdecec; color: #8a1116; }
    ol.timeline { list-style: none; margin: 0; padding: 0; }
    ol.timeline li { padding: .35em 0; border-top: 1px solid var(--line); display: flex; gap: .6em; flex-wrap: wrap; }
    ol.timeline li:first-child { border-top: 0; }
    ol.timeline time { font-variant-numeric: tabular-nums; color: var(--muted); }
    .tone-bad .line { color: #8a1116; }
    .tone-good .line { color: var(--on); }
    """#
}
