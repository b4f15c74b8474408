// Marks the page once MathJax has typeset it and its fonts have loaded: <html data-math-rendered="N"
// data-page-height="H"> with N rendered formulas and H the page's height in CSS pixels then (the
// browser tests wait for the first attribute and bound the second, so a proof page cannot regrow).
window.addEventListener("load", function () {
  var root = document.documentElement;
  function mark(count) {
    root.dataset.pageHeight = String(root.scrollHeight);
    root.dataset.mathRendered = String(count);
  }
  var mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) {
    mark(0);
    return;
  }
  mj.startup.promise.then(function () {
    return document.fonts ? document.fonts.ready : null;
  }).then(function () {
    mark(document.querySelectorAll("mjx-container").length);
  });
});
