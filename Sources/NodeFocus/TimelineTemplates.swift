// The timeline's lines (Protocol/bedtime.md "The timeline"): several per kind and tone, one line
// each as `kind tone | text`. Tones follow the health state at the moment: playful (healthy),
// concerned (concerned), strained (tired), faint (weak and dead). Placeholders: {mode}, {cost},
// {health}, {reason}, {until}, {count}, {gap}. Edit freely: a kind or tone without lines falls
// back to the kind's playful lines, then to the event's name.
extension TimelineBook {
    static let templateText = """
        locked playful | {mode} is locked. The fortress stands.
        locked playful | Locked into {mode}. Nothing gets past the drawbridge.
        locked playful | {mode} locked — distractions left at the door.
        locked concerned | {mode} locked again. Let's hold it this time.
        locked concerned | Back into {mode}. A steadier stretch would help.
        locked strained | {mode} locked. Worn, but still trying.
        locked strained | Locked {mode}, with a tired hand.
        locked faint | {mode} locked. A small light, still on.
        locked faint | Locked {mode}, barely — and that counts.
        unlocked playful | {mode} opened with its key ({reason}). Earned it.
        unlocked playful | {mode} is open again ({reason}). Stretch your legs.
        unlocked playful | Key turned: {mode} unlocked ({reason}).
        unlocked concerned | {mode} unlocked ({reason}). Keep an eye on the pool.
        unlocked concerned | {mode} open ({reason}); health sits at {health}.
        unlocked strained | {mode} unlocked ({reason}). The day is getting heavy.
        unlocked strained | {mode} open again ({reason}), health {health}.
        unlocked faint | {mode} unlocked ({reason}). Very little left in the tank.
        unlocked faint | {mode} open ({reason}). Rest soon.
        temp_unlocked playful | A temporary key opened {mode} until {until}.
        temp_unlocked playful | Short leash: {mode} loosened until {until}.
        temp_unlocked concerned | Another temporary opening of {mode}, until {until}.
        temp_unlocked strained | {mode} opened for a while again (until {until}).
        temp_unlocked faint | {mode} opened once more, until {until}. It is wearing thin.
        relocked playful | Break over: {mode} closed again.
        relocked playful | {mode} snapped shut on schedule.
        relocked concerned | {mode} closed again. Good.
        relocked strained | {mode} relocked; hold on.
        relocked faint | {mode} closed again. Breathe.
        bypass playful | A bypass: −{cost} health, {health} left.
        bypass playful | That cost {cost}. Health {health}.
        bypass concerned | Another bypass (−{cost}). Health down to {health}.
        bypass concerned | −{cost} for that one; {health} remain.
        bypass strained | −{cost} again. Health {health}, and it shows.
        bypass strained | Bypass taken, −{cost}. Only {health} left.
        bypass faint | −{cost}. Health {health}. Almost nothing left.
        bypass faint | One more bypass, −{cost}; {health} left to give.
        first_bypass playful | The day's first bypass: −{cost}, {health} left. Only one, right?
        first_bypass playful | First crack of the day (−{cost}). Health {health}.
        first_bypass concerned | First bypass of the day, −{cost}. Health {health}.
        first_bypass strained | The first bypass today, −{cost}: {health} left.
        first_bypass faint | First bypass today, −{cost}: {health} left.
        bypass_streak playful | Three bypasses within 15 minutes — slow down. Health {health}.
        bypass_streak playful | {count} bypasses in a quarter hour? Easy, tiger. Health {health}.
        bypass_streak concerned | {count} bypasses in a quarter of an hour. Health {health}.
        bypass_streak strained | Bypass after bypass ({count} in 15 minutes). Health {health}.
        bypass_streak faint | {count} bypasses in 15 minutes. Health {health}. Stop here.
        refused playful | A bypass was refused: {reason}.
        refused concerned | Refused: {reason}.
        refused strained | Not now: {reason}.
        refused faint | No more today: {reason}.
        dead faint | Health reached 0. Everything stays locked until midnight.
        dead faint | Zero. Nothing opens until midnight now.
        challenge_started playful | A challenge started. Game on.
        challenge_started playful | Challenge running — friends are watching.
        challenge_started concerned | A challenge started. A chance to steady things.
        challenge_started strained | Into a challenge, tired as you are.
        challenge_started faint | A challenge began. Go gently.
        challenge_ended playful | The challenge ended: {reason}.
        challenge_ended playful | Challenge over — {reason}.
        challenge_ended concerned | Challenge finished: {reason}.
        challenge_ended strained | The challenge is over ({reason}).
        challenge_ended faint | Challenge done: {reason}.
        challenge_quit playful | Quit a challenge early ({reason}).
        challenge_quit playful | Bowed out of a challenge early ({reason}).
        challenge_quit concerned | Left a challenge early ({reason}).
        challenge_quit strained | Another early exit from a challenge ({reason}).
        challenge_quit faint | Walked out of a challenge ({reason}).
        bedtime_started playful | Bedtime: {mode} locked for the night. {reason}.
        bedtime_started playful | Lights out — {mode} locked until morning. {reason}.
        bedtime_started concerned | Bedtime locked {mode}. Sleep will help. {reason}.
        bedtime_started strained | Bedtime. {mode} is locked; rest now. {reason}.
        bedtime_started faint | Bedtime at last: {mode} locked. {reason}.
        bedtime_left playful | Morning! A daylight photo opened {mode}.
        bedtime_left playful | Sun's up and so are you: {mode} opened by daylight.
        bedtime_left concerned | A daylight photo opened {mode}.
        bedtime_left strained | Daylight found; {mode} open.
        bedtime_left faint | Out into the light: {mode} open.
        bedtime_emergency playful | Bedtime broken by an emergency unlock (−{cost}).
        bedtime_emergency playful | A midnight escape hatch: emergency unlock, −{cost}.
        bedtime_emergency concerned | Emergency exit from bedtime, −{cost}.
        bedtime_emergency strained | Emergency unlock in the night (−{cost}).
        bedtime_emergency faint | An emergency unlock of bedtime (−{cost}).
        bedtime_refused playful | Too soon: {reason}.
        bedtime_refused playful | The night says no: {reason}.
        bedtime_refused concerned | Not yet — {reason}.
        bedtime_refused strained | Still night: {reason}.
        bedtime_refused faint | Not yet: {reason}.
        quiet_return playful | Back after {gap} of quiet.
        quiet_return playful | {gap} without a sound, and now back.
        quiet_return concerned | Back after {gap}.
        quiet_return strained | After {gap} away, back again.
        quiet_return faint | Back after {gap}. Easy does it.
        summary playful | The day: {count} events, health {health}. A good one.
        summary playful | All told: {count} events, ending at {health} health.
        summary concerned | The day: {count} events, health {health}. Tomorrow starts at 100.
        summary strained | A long day: {count} events, health {health}.
        summary faint | The day ends at {health} health after {count} events. Rest.
        """
}
