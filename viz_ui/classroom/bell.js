// A student's class bell (viz_ui/classroom/bell.py): one long-polled request at a time to the app's news route
// (viz_ui/classroom/news.py), answered by the server when the class's news differs from what it was sent. When the
// news differs from the news this screen was drawn with (a new view while following, a new or revealed question,
// the class ended), the bell rings once: a trigger, which reruns the poll's fragment on the server, as the poll's
// own timer would a few seconds later. The request in flight survives a new draw of the bell (new data); it is
// aborted when the bell leaves the page.

const LOOPS = new WeakMap(); // the bell's element -> its loop

function differs(news, data) {
  // news: "{view version}:{question id}:{revealed}"; a new view counts only while following
  if (news === data.news) return false;
  const [view, ...question] = news.split(":");
  const [shown, ...asked] = data.news.split(":");
  return (data.following && view !== shown) || question.join(":") !== asked.join(":");
}

function start(data) {
  const loop = {data, send: null, controller: new AbortController(), rung: null, stopTimer: null};
  const url = new URL(data.url, document.baseURI);
  const signal = loop.controller.signal;
  const ring = news => {
    if (loop.rung === news || signal.aborted) return;
    loop.rung = news;
    loop.send("news", news);
  };
  (async () => {
    let seen = data.news;
    let delay = 0;
    while (!signal.aborted) {
      url.searchParams.set("seen", seen);
      try {
        const response = await fetch(url, {cache: "no-store", signal});
        if (response.status === 404) {
          ring("gone"); // the class ended: the poll says so and leaves it
          return;
        }
        if (!response.ok) throw new Error(`news: HTTP ${response.status}`);
        const news = (await response.json()).news;
        if (typeof news !== "string") throw new Error("news: no news in the answer");
        delay = 0;
        if (differs(news, loop.data)) ring(news);
        seen = news;
      } catch (error) {
        if (signal.aborted) return;
        // the server restarting, a network hiccup: wait (0.5 s, doubling up to 10 s); the poll's timer goes on
        delay = Math.min(10000, delay ? 2 * delay : 500);
        await new Promise(resolve => setTimeout(resolve, delay));
      }
    }
  })();
  return loop;
}

export default function (component) {
  const {data, parentElement, setTriggerValue} = component;
  let loop = LOOPS.get(parentElement);
  if (loop && loop.data.url === data.url) {
    clearTimeout(loop.stopTimer); // drawn again: the same loop, with the new data
    loop.stopTimer = null;
    loop.data = data;
  } else {
    if (loop) loop.controller.abort();
    loop = start(data);
    LOOPS.set(parentElement, loop);
  }
  loop.send = setTriggerValue;
  return () => {
    // also called just before the bell is drawn again: the loop stops unless a new draw follows at once
    loop.stopTimer = setTimeout(() => {
      loop.controller.abort();
      if (LOOPS.get(parentElement) === loop) LOOPS.delete(parentElement);
    }, 0);
  };
}
